# syntax=docker/dockerfile:1
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY scheduler scheduler
COPY handlers handlers
COPY api api
COPY seed seed
COPY tickd tickd
# Handler plug-ins built into the image (docs/writing-handlers.md, "Shipping a plug-in"): what
# pip understands, from the index or from wheels put in plugins/, e.g.
#   docker build --build-arg PLUGINS="billing-jobs==1.4.2" -t tickd-billing .
# They are resolved together with tickd, so a plug-in's `tickd` dependency is this tickd.
ARG PLUGINS=""
COPY plugins plugins
RUN pip wheel --no-cache-dir --wheel-dir /wheels --find-links plugins '.[all]' $PLUGINS

FROM python:3.11-slim
RUN useradd --system --create-home --uid 10001 tickd
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels /wheels/*.whl && rm -rf /wheels
COPY config /etc/tickd
USER tickd
WORKDIR /home/tickd
# The API listens beyond loopback, so the daemon starts only once TICKD_API_TOKENS is given
# (config/production.toml ships no token): docker run -e TICKD_API_TOKENS="ops:admin:..." ...
ENV TICKD_API_HOST=0.0.0.0 TICKD_LOG_FORMAT=json PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2); sys.exit(0)"
STOPSIGNAL SIGTERM
ENTRYPOINT ["tickd"]
CMD ["--config", "/etc/tickd/production.toml", "run"]
