"""The authorizer (Kafka's ZooKeeper-mode AclAuthorizer): ACL vocabulary, decision core,
ZooKeeper store and the broker's shell around them."""
