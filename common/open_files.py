"""The open-file limit: a broker holds one descriptor per hosted replica (its active segment),
plus its connections, so thousands of partitions need more than a shell's default soft limit.

Like the JVM (`-XX:+MaxFDLimit`, on by default), the broker raises its soft limit to the hard
limit at start-up; raising the hard limit is the operator's (ulimit, systemd `LimitNOFILE`, the
container runtime)."""

import resource


def raise_soft_limit() -> tuple[int, int]:
    """Set RLIMIT_NOFILE's soft limit to its hard limit; returns (soft, hard) as they now are."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # e.g. an infinite hard limit the kernel caps lower
            pass
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard
