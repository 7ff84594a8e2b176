"""The network layer both the broker and the controller use: sans-I/O framing, the socket server and its
pipelining policy, response encoding, the client."""
