module github.com/neonbox/neonbox-ns

go 1.26.0

require github.com/stretchr/testify v1.12.1

require (
	github.com/containerd/cgroups/v3 v3.1.3 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/seccomp/libseccomp-golang v0.11.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
