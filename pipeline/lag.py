"""How far a streaming query is behind its topics, as Spark's Kafka source reports it.

PySpark's Python stream readers cannot report custom source metrics, but every progress report
carries the reader's `endOffset` and `latestOffset` (from `reportLatestOffset`), which is all
Spark's min/max/avgOffsetsBehindLatest need.
"""

from __future__ import annotations

import json

from . import offsets


def offsets_behind_latest(source_progress: object) -> dict[str, str]:
    """`{"minOffsetsBehindLatest": ..., "maxOffsetsBehindLatest": ..., "avgOffsetsBehindLatest": ...}`
    for one source of a StreamingQueryProgress (`query.lastProgress.sources[0]`, or its dict
    form); empty when the progress has no offsets yet."""
    get = source_progress.get if isinstance(source_progress, dict) else lambda k: getattr(source_progress, k)
    end, latest = get("endOffset"), get("latestOffset")
    if not end or not latest:
        return {}
    end = json.loads(end) if isinstance(end, str) else end
    latest = json.loads(latest) if isinstance(latest, str) else latest
    return offsets.offsets_behind_latest(offsets.from_json_dict(end), offsets.from_json_dict(latest))
