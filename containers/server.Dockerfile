# paragrade server: the FastAPI service (API, reaper, queue publisher). Build from the repo root:
#   docker build -f containers/server.Dockerfile -t paragrade/server .
# (scripts/build-images.sh does this with podman or docker, making the base where none is pulled.)
# The first four steps are runner-cpu.Dockerfile's, word for word: the engine builds them once.
FROM debian:bookworm-slim
COPY containers/install.sh /src/containers/install.sh
RUN /src/containers/install.sh system
COPY pyproject.toml /src/pyproject.toml
RUN /src/containers/install.sh app-deps
LABEL org.opencontainers.image.title="paragrade server" \
      io.paragrade.role="server" \
      io.paragrade.protocol="10"
RUN useradd --system --uid 10001 paragrade && mkdir -p /var/lib/paragrade/artifacts \
    && chown -R paragrade /var/lib/paragrade
COPY . /src
RUN /src/containers/install.sh app
ENV PARAGRADE_SERVER_ASSIGNMENTS_DIR=/src/assignments
USER paragrade
WORKDIR /var/lib/paragrade
EXPOSE 8000
HEALTHCHECK CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz')"]
ENTRYPOINT ["paragrade"]
CMD ["serve", "--host", "0.0.0.0", "--no-runner"]
