# paragrade server: the FastAPI service (API, reaper, queue publisher). Build from the repo root:
#   docker build -f containers/server.Dockerfile -t paragrade/server .
FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="paragrade server" \
      io.paragrade.role="server" \
      io.paragrade.protocol="2"
ENV PYTHON=python3.11 SRC=/src
COPY . /src
RUN /src/containers/install.sh server && useradd --system --uid 10001 paragrade \
    && mkdir -p /var/lib/paragrade/artifacts && chown -R paragrade /var/lib/paragrade
USER paragrade
WORKDIR /var/lib/paragrade
EXPOSE 8000
HEALTHCHECK CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz')"
ENTRYPOINT ["paragrade"]
CMD ["serve", "--host", "0.0.0.0", "--no-runner"]
