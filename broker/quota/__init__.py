"""Client quotas (Kafka's ClientQuotaManager family): storage in ZooKeeper, the admin APIs, enforcement."""
