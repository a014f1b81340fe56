# The one flps image: every binary (flps, flworker, flrun, flsubmit, flsched,
# flagent) and libflps under /opt/flps, run as the non-root user flps (uid
# 10001).
#
#   podman build --build-arg BASE=localhost/flps-base:bookworm -t flps:0.2.0 .
#   docker build -t flps:0.2.0 .
#
# BASE must be Debian 12 (bookworm) or an image made from it: the package
# names below are Debian 12's. The default is the public debian:12; the CI
# here passes a base made with debootstrap (scripts/image.sh).
ARG BASE=debian:12

# ---- stage 1: build ----------------------------------------------------------
FROM ${BASE} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config \
      libzmq3-dev libmsgpack-dev libyaml-dev libjansson-dev zlib1g-dev \
      libopenblas-dev libhiredis-dev libmicrohttpd-dev libcurl4-openssl-dev \
      libssl-dev \
      libibverbs-dev librdmacm-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# FLPS_TESTS=OFF: the image needs no Criterion. --strip drops the debug
# information the Release flags (-O3 -g) keep.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DFLPS_TESTS=OFF \
 && cmake --build /build -j"$(nproc)" \
 && cmake --install /build --prefix /opt/flps --strip \
 && mkdir -p /opt/flps/share/flps /opt/flps/lib/python3/dist-packages \
 && cp -r examples /opt/flps/share/flps/examples \
 && cp -r python/flps /opt/flps/lib/python3/dist-packages/flps \
 && find /opt/flps/lib/python3 -name __pycache__ -prune -exec rm -rf {} +

# ---- stage 2: runtime --------------------------------------------------------
FROM ${BASE}
ARG BASE
ARG DEBIAN_FRONTEND=noninteractive
# WITH_DATASET=1 puts Fashion-MNIST (about 30 MB) where job files look for it
# by default (/usr/share/datasets/fashion-mnist); 0 leaves it out.
ARG WITH_DATASET=1
ARG VERSION=0.2.0
RUN set -e; \
    extra=""; \
    if [ "$WITH_DATASET" = 1 ]; then extra="dataset-fashion-mnist"; fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends \
      libzmq5 libmsgpackc2 libyaml-0-2 libjansson4 libopenblas0 \
      libhiredis0.14 libmicrohttpd12 libcurl4 libssl3 zlib1g ca-certificates \
      libibverbs1 librdmacm1 ibverbs-providers \
      python3 python3-numpy $extra; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin; \
    groupadd --gid 10001 flps; \
    useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin flps
COPY --from=build /opt/flps /opt/flps
RUN echo /opt/flps/lib > /etc/ld.so.conf.d/flps.conf && ldconfig
ENV PATH=/opt/flps/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    FLPS_BIN_DIR=/opt/flps/bin \
    FLPS_LIBRARY=/opt/flps/lib/libflps.so.0 \
    PYTHONPATH=/opt/flps/lib/python3/dist-packages \
    TMPDIR=/tmp
LABEL org.opencontainers.image.title="flps" \
      org.opencontainers.image.description="flps parameter-server cluster: flps shards, flworker, flrun, flsubmit, flsched, flagent" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.base.name="${BASE}" \
      org.opencontainers.image.documentation="docs/deploy.md"
USER 10001:10001
WORKDIR /tmp
# No ENTRYPOINT: the chart and users name the program to run.
CMD ["flsched", "--help"]
