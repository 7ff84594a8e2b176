from kazoo.client import KazooClient


def test_zookeeper_serves_a_chroot(zk_connect):
    zk = KazooClient(hosts=zk_connect.split("/", 1)[0], timeout=5)
    zk.start(timeout=10)
    try:
        chroot = "/" + zk_connect.split("/", 1)[1]
        zk.ensure_path(chroot + "/brokers/ids")
        assert zk.get_children(chroot + "/brokers") == ["ids"]
    finally:
        zk.stop()
        zk.close()
