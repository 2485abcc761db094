# The controller's image: `koord-queue controller` on a slim Python 3.11.
#   docker build -t koord-queue:0.1.0 .
# Stage 1 builds the project's wheel; stage 2 installs only that wheel (and its
# pinned dependencies) and runs it as a non-root numeric user, as the chart's
# securityContext expects (runAsNonRoot, readOnlyRootFilesystem, /tmp an emptyDir).

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
COPY --from=build /dist /dist
RUN pip install --no-cache-dir /dist/koord_queue-*.whl \
    && rm -rf /dist
USER 65532:65532
# /metrics /healthz /readyz, and the admission webhook
EXPOSE 8080 9443
ENTRYPOINT ["koord-queue", "controller"]
