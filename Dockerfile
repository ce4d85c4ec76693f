# murmurd in a container: serves the capsule mounted at /capsule on port 8080.
#   docker build -t murmurd .
#   docker run --rm -p 8080:8080 -v "$PWD/examples/hello:/capsule" murmurd
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    MURMUR_CACHE_DIR=/var/cache/murmurd

WORKDIR /opt/murmurd
COPY pyproject.toml README.md ./
COPY murmurd ./murmurd
COPY wit ./wit
COPY examples ./examples
RUN pip install . \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/murmurd --create-home murmurd \
    && mkdir -p /var/cache/murmurd /var/lib/murmurd/state \
    && chown -R murmurd /var/cache/murmurd /var/lib/murmurd

# numeric, so Kubernetes' runAsNonRoot can verify it (deploy/kubernetes runs as 10001 too)
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["murmurd"]
CMD ["serve", "/capsule", "--host", "0.0.0.0", "--port", "8080", "--state-dir", "/var/lib/murmurd/state", "--after-task", "sleep"]
