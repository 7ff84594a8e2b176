"""Odradek: a Kafka-compatible log run on Kubernetes."""
