"""Reading a Prometheus endpoint in tests: GET /metrics and the samples by name and labels."""

import re
import urllib.request

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(url: str, timeout: float = 5.0) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")  # no Accept header: text 0.0.4
        text = response.read().decode()
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a Prometheus sample: {line!r}"
        name, labels, value = match.groups()
        samples.append((name, dict(LABEL.findall(labels or "")), float(value)))
    return samples


def value(samples, metric: str, **labels) -> float:
    """The sum of `metric` over the samples carrying `labels` (0 when none)."""
    return sum(v for n, ls, v in samples if n == metric and all(ls.get(k) == w for k, w in labels.items()))
