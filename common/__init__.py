"""Pieces shared by broker, controller and operator: ZooKeeper layout, wire framing, messages."""
