module github.com/torchd/torchd

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/VictoriaMetrics/metrics v1.35.1
	github.com/pkg/profile v1.7.0
	github.com/valyala/fasthttp v1.70.0
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/image v0.47.0
	golang.org/x/term v0.47.0
)

require (
	github.com/andybalholm/brotli v1.2.1 // indirect
	github.com/felixge/fgprof v0.9.3 // indirect
	github.com/google/pprof v0.0.0-20211214055906-6f57359322fd // indirect
	github.com/klauspost/compress v1.18.5 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
