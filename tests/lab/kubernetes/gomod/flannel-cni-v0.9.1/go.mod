// Written by hand for tests/lab/kubernetes/build-addon-gomod: flannel's CNI plugin as the Go module
// github.com/containernetworking/plugins v0.9.1 has it (plugins/meta/flannel), the code
// github.com/flannel-io/cni-plugin was forked from. A SUBSTITUTE for flannel-io/cni-plugin
// v1.8.0-flannel1 (the plugin kube-flannel.yml v0.27.4 names): the Go module proxy does not serve
// github.com/flannel-io/cni-plugin (403, 2026-11-28).
module kubexm.lab/flannel-cni-v0.9.1

go 1.26.0

require github.com/containernetworking/plugins v0.9.1

require (
	github.com/Microsoft/go-winio v0.4.11 // indirect
	github.com/Microsoft/hcsshim v0.8.6 // indirect
	github.com/buger/jsonparser v0.0.0-20180808090653-f4dd9f5a6b44 // indirect
	github.com/containernetworking/cni v0.8.1 // indirect
	github.com/sirupsen/logrus v1.0.6 // indirect
	golang.org/x/crypto v0.0.0-20200622213623-75b288015ac9 // indirect
	golang.org/x/sys v0.0.0-20201117170446-d9b008d0a637 // indirect
)
