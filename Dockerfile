# Build a static binary, then ship it alone on a minimal base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sluice .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /sluice
ENV SLUICE_ADDR=:8080 SLUICE_DATA_DIR=/data
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["/sluice"]
CMD ["serve"]
