# One image for brokers, controllers and the operator: `odradek broker|controller|operator`.
FROM python:3.11-slim AS build
WORKDIR /src
# gcc for the C extensions (broker/log/_records.c, the record validator; _cleaner.c, the log cleaner)
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
# The whole checkout but what .dockerignore leaves out: the wheel is the one `pip install .` builds
# anywhere, every odradek.<folder> the odradek/ symlinks name (tests/test_folders.py checks that
# none is left out), pipeline/ included. The image runs brokers, controllers and the operator; the
# PySpark data source's dependencies are the `spark` extra, installed where Spark runs, not here.
COPY . .
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin odradek \
 && mkdir -p /var/lib/odradek && chown 10001:10001 /var/lib/odradek
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# Read-only root filesystem in pods: no .pyc writes.
ENV PYTHONDONTWRITEBYTECODE=1
USER 10001
WORKDIR /home/odradek
EXPOSE 9092 9093
ENTRYPOINT ["odradek"]
