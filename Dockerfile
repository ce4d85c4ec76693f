# murmurd in a container: serves the capsule mounted at /capsule on port 8080, to callers holding
# the operator token mounted at /run/secrets/murmurd-token (without it murmurd refuses to start).
#   docker build -t murmurd .
#   head -c 32 /dev/urandom | base64 | tr -d '/+=' > murmurd-token && chmod 644 murmurd-token
#   docker run --rm -p 8080:8080 -v "$PWD/examples/hello:/capsule" \
#     -v "$PWD/murmurd-token:/run/secrets/murmurd-token:ro" murmurd
#   MURMUR_TOKEN_FILE=murmurd-token murmurd send http://127.0.0.1:8080 "Say hello"
# More credentials (peers, trust classes, expiry, mutual TLS): docs/security.md; e.g. replace the
# token with --credentials /run/secrets/murmurd-credentials.yaml.
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
CMD ["serve", "/capsule", "--host", "0.0.0.0", "--port", "8080", "--state-dir", "/var/lib/murmurd/state", "--token-file", "/run/secrets/murmurd-token"]
