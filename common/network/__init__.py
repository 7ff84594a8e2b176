"""The network layer both the broker and the controller use: the socket server, response encoding, the client."""
