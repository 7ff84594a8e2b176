"""common/network/encoding.py: the primitives of hand-written response bodies."""



from odradek.common.network import encoding


def test_encoding_primitives():
    assert encoding.uvarint(0) == b"\0"
    assert encoding.uvarint(300) == b"\xac\x02"
    w = encoding.BodyWriter(flexible=True)
    w.string(None)
    w.string("ab")
    w.array(None)
    w.array(2)
    assert b"".join(w.chunks()) == b"\0\x03ab\0\x03"
    w = encoding.BodyWriter(flexible=False)
    w.string(None)
    w.array(None)
    assert b"".join(w.chunks()) == b"\xff\xff\xff\xff\xff\xff"
