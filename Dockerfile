# One image for brokers, controllers and the operator: `odradek broker|controller|operator`.
FROM python:3.11-slim AS build
WORKDIR /src
# gcc for the record validator's C extension (broker/log/_records.c)
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY odradek odradek
COPY broker broker
COPY controller controller
COPY operator operator
COPY common common
COPY dev dev
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
