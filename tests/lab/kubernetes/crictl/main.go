// KUBEXM LAB STAND-IN for crictl -- NOT the real crictl (kubernetes-sigs/cri-tools).
//
// Debian 12 has no cri-tools package, and kubeadm v1.20.2's preflight (init, control-plane join)
// and its reset need a `crictl` on PATH. This small CRI client covers the calls kubeadm and
// KubeXM make: it speaks the real CRI (runtime.v1alpha2, the API kubelet v1.20 uses) over the
// runtime's socket with the client code vendored in the same Kubernetes v1.20.2 tree, so pods are
// stopped and removed by the runtime itself (networks torn down, the runtime's state consistent)
// and pulls use the runtime's own registry configuration, as with the real crictl.
//
//	crictl [-r|--runtime-endpoint EP] [-i|--image-endpoint EP] [-t|--timeout D] [-D|--debug] COMMAND
//	  info | version | pods [-q] | ps [-a] [-q] | stopp ID... | rmp [-a] [-f] ID...
//	  images [-q] | inspecti IMAGE... | pull [--auth B64 | --creds USER:PASS] IMAGE
//
// Endpoints default to /etc/crictl.yaml (runtime-endpoint, image-endpoint, timeout), else
// unix:///run/containerd/containerd.sock. Built by tests/lab/kubernetes/build-crictl.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1alpha2"
)

const (
	standIn         = "KUBEXM LAB STAND-IN"
	version         = "v1.20.0"
	defaultEndpoint = "unix:///run/containerd/containerd.sock"
	configFile      = "/etc/crictl.yaml"
)

type options struct {
	runtimeEndpoint string
	imageEndpoint   string
	timeout         time.Duration
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "crictl (%s): %v\n", standIn, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	opts := options{timeout: 10 * time.Second}
	readConfig(&opts)
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		flag, value, hasValue := strings.Cut(args[0], "=")
		takeValue := func() (string, error) {
			if hasValue {
				args = args[1:]
				return value, nil
			}
			if len(args) < 2 {
				return "", fmt.Errorf("flag %s needs a value", flag)
			}
			v := args[1]
			args = args[2:]
			return v, nil
		}
		var err error
		switch flag {
		case "-r", "--runtime-endpoint":
			opts.runtimeEndpoint, err = takeValue()
		case "-i", "--image-endpoint":
			opts.imageEndpoint, err = takeValue()
		case "-t", "--timeout":
			var v string
			if v, err = takeValue(); err == nil {
				opts.timeout, err = parseTimeout(v)
			}
		case "-c", "--config":
			_, err = takeValue() // the stand-in reads only /etc/crictl.yaml
		case "-D", "--debug":
			args = args[1:]
		case "--version", "-v":
			fmt.Printf("crictl version %s (%s)\n", version, standIn)
			return nil
		case "-h", "--help":
			usage()
			return nil
		default:
			return fmt.Errorf("unknown global flag %q", args[0])
		}
		if err != nil {
			return err
		}
	}
	if len(args) == 0 {
		usage()
		return fmt.Errorf("no command given")
	}
	if opts.runtimeEndpoint == "" {
		opts.runtimeEndpoint = defaultEndpoint
	}
	if opts.imageEndpoint == "" {
		opts.imageEndpoint = opts.runtimeEndpoint
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "info":
		return info(opts)
	case "version":
		return showVersion(opts)
	case "pods":
		return pods(opts, rest)
	case "ps":
		return ps(opts, rest)
	case "stopp":
		return stopPods(opts, rest)
	case "rmp":
		return removePods(opts, rest)
	case "images", "image", "img":
		return images(opts, rest)
	case "inspecti":
		return inspectImages(opts, rest)
	case "pull":
		return pull(opts, rest)
	default:
		return fmt.Errorf("command %q is not implemented by this stand-in", cmd)
	}
}

func usage() {
	fmt.Printf("crictl %s (%s: a small CRI client for the KubeXM lab, not cri-tools)\n", version, standIn)
	fmt.Println("commands: info, version, pods [-q], ps [-a] [-q], stopp ID..., rmp [-a] [-f] ID...,")
	fmt.Println("          images [-q], inspecti IMAGE..., pull [--auth B64|--creds USER:PASS] IMAGE")
}

func parseTimeout(v string) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	d, err := time.ParseDuration(v + "s")
	if err != nil {
		return 0, fmt.Errorf("bad timeout %q", v)
	}
	return d, nil
}

// readConfig takes runtime-endpoint, image-endpoint and timeout from /etc/crictl.yaml (flat
// `key: value` lines, as KubeXM and crictl write it).
func readConfig(opts *options) {
	f, err := os.Open(configFile)
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		key, value, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		value = strings.Trim(strings.TrimSpace(value), `"'`)
		switch strings.TrimSpace(key) {
		case "runtime-endpoint":
			opts.runtimeEndpoint = value
		case "image-endpoint":
			opts.imageEndpoint = value
		case "timeout":
			if d, err := parseTimeout(value); err == nil {
				opts.timeout = d
			}
		}
	}
}

func dial(endpoint string, timeout time.Duration) (*grpc.ClientConn, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("endpoint %q: only unix sockets are supported", endpoint)
	}
	if st, err := os.Stat(path); err != nil || st.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("connect to %s: no socket at %s (is the runtime running?)", endpoint, path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := grpc.DialContext(ctx, path, grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	return conn, nil
}

func runtimeClient(opts options) (pb.RuntimeServiceClient, func(), error) {
	conn, err := dial(opts.runtimeEndpoint, opts.timeout)
	if err != nil {
		return nil, nil, err
	}
	return pb.NewRuntimeServiceClient(conn), func() { conn.Close() }, nil
}

func imageClient(opts options) (pb.ImageServiceClient, func(), error) {
	conn, err := dial(opts.imageEndpoint, opts.timeout)
	if err != nil {
		return nil, nil, err
	}
	return pb.NewImageServiceClient(conn), func() { conn.Close() }, nil
}

func ctx(opts options) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opts.timeout)
}

func printJSON(v interface{}) error {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// flags splits `-a -q -f` style switches from positional arguments.
func flags(args []string, known ...string) (map[string]bool, []string, error) {
	set := map[string]bool{}
	var rest []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			rest = append(rest, a)
			continue
		}
		ok := false
		for _, k := range known {
			for _, name := range strings.Split(k, "|") {
				if a == name {
					set[strings.Split(k, "|")[0]] = true
					ok = true
				}
			}
		}
		if !ok {
			return nil, nil, fmt.Errorf("flag %q is not implemented by this stand-in", a)
		}
	}
	return set, rest, nil
}

// onlyFlags is flags for a command that takes no positional arguments.
func onlyFlags(cmd string, args []string, known ...string) (map[string]bool, error) {
	set, rest, err := flags(args, known...)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("%s takes no arguments (filtering is not implemented by this stand-in)", cmd)
	}
	return set, err
}

func info(opts options) error {
	c, done, err := runtimeClient(opts)
	if err != nil {
		return err
	}
	defer done()
	cx, cancel := ctx(opts)
	defer cancel()
	st, err := c.Status(cx, &pb.StatusRequest{Verbose: false})
	if err != nil {
		return fmt.Errorf("runtime status: %w", err)
	}
	return printJSON(map[string]interface{}{"status": st.Status, "standIn": standIn})
}

func showVersion(opts options) error {
	c, done, err := runtimeClient(opts)
	if err != nil {
		return err
	}
	defer done()
	cx, cancel := ctx(opts)
	defer cancel()
	v, err := c.Version(cx, &pb.VersionRequest{})
	if err != nil {
		return fmt.Errorf("runtime version: %w", err)
	}
	fmt.Printf("Version:  %s\nRuntimeName:  %s\nRuntimeVersion:  %s\nRuntimeApiVersion:  %s\n",
		v.Version, v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
	fmt.Printf("# crictl %s (%s)\n", version, standIn)
	return nil
}

func listPods(opts options, c pb.RuntimeServiceClient) ([]*pb.PodSandbox, error) {
	cx, cancel := ctx(opts)
	defer cancel()
	r, err := c.ListPodSandbox(cx, &pb.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	return r.Items, nil
}

func pods(opts options, args []string) error {
	set, err := onlyFlags("pods", args, "-q|--quiet")
	if err != nil {
		return err
	}
	c, done, err := runtimeClient(opts)
	if err != nil {
		return err
	}
	defer done()
	items, err := listPods(opts, c)
	if err != nil {
		return err
	}
	l := listing{header: "POD ID\tCREATED\tSTATE\tNAME\tNAMESPACE\tATTEMPT"}
	for _, p := range items {
		l.add(p.Id, fmt.Sprintf("%.13s\t%s\t%s\t%s\t%s\t%d", p.Id, time.Unix(0, p.CreatedAt).UTC().Format(time.RFC3339),
			p.State, p.Metadata.GetName(), p.Metadata.GetNamespace(), p.Metadata.GetAttempt()))
	}
	return l.print(set["-q"])
}

// listing is what a list command prints: IDs with -q, else a table.
type listing struct {
	header string
	ids    []string
	rows   []string
}

func (l *listing) add(id, row string) {
	l.ids = append(l.ids, id)
	l.rows = append(l.rows, row)
}

func (l *listing) print(quiet bool) error {
	if quiet {
		seen := map[string]bool{} // an image with several tags has one ID
		for _, id := range l.ids {
			if !seen[id] {
				fmt.Println(id)
			}
			seen[id] = true
		}
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, l.header)
	for _, row := range l.rows {
		fmt.Fprintln(w, row)
	}
	return w.Flush()
}

func ps(opts options, args []string) error {
	set, err := onlyFlags("ps", args, "-a|--all", "-q|--quiet")
	if err != nil {
		return err
	}
	c, done, err := runtimeClient(opts)
	if err != nil {
		return err
	}
	defer done()
	cx, cancel := ctx(opts)
	defer cancel()
	req := &pb.ListContainersRequest{}
	if !set["-a"] {
		req.Filter = &pb.ContainerFilter{State: &pb.ContainerStateValue{State: pb.ContainerState_CONTAINER_RUNNING}}
	}
	r, err := c.ListContainers(cx, req)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	l := listing{header: "CONTAINER\tIMAGE\tSTATE\tNAME\tATTEMPT\tPOD ID"}
	for _, ct := range r.Containers {
		l.add(ct.Id, fmt.Sprintf("%.13s\t%s\t%s\t%s\t%d\t%.13s", ct.Id, ct.Image.GetImage(), ct.State,
			ct.Metadata.GetName(), ct.Metadata.GetAttempt(), ct.PodSandboxId))
	}
	return l.print(set["-q"])
}

func stopPods(opts options, ids []string) error {
	if len(ids) == 0 {
		return fmt.Errorf("stopp: no pod sandbox ID given")
	}
	c, done, err := runtimeClient(opts)
	if err != nil {
		return err
	}
	defer done()
	var failed []string
	for _, id := range ids {
		if err := stopPod(opts, c, id); err != nil {
			fmt.Fprintf(os.Stderr, "stopping pod sandbox %q: %v\n", id, err)
			failed = append(failed, id)
			continue
		}
		fmt.Printf("Stopped sandbox %s\n", id)
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not stop %s", strings.Join(failed, ", "))
	}
	return nil
}

func stopPod(opts options, c pb.RuntimeServiceClient, id string) error {
	cx, cancel := ctx(opts)
	defer cancel()
	_, err := c.StopPodSandbox(cx, &pb.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

func removePods(opts options, args []string) error {
	set, ids, err := flags(args, "-a|--all", "-f|--force")
	if err != nil {
		return err
	}
	c, done, err := runtimeClient(opts)
	if err != nil {
		return err
	}
	defer done()
	if set["-a"] {
		items, err := listPods(opts, c)
		if err != nil {
			return err
		}
		for _, p := range items {
			ids = append(ids, p.Id)
		}
	} else if len(ids) == 0 {
		return fmt.Errorf("rmp: no pod sandbox ID given (or -a)")
	}
	var failed []string
	for _, id := range ids {
		if set["-f"] {
			if err := stopPod(opts, c, id); err != nil {
				fmt.Fprintf(os.Stderr, "stopping pod sandbox %q: %v\n", id, err)
				failed = append(failed, id)
				continue
			}
		}
		cx, cancel := ctx(opts)
		_, err := c.RemovePodSandbox(cx, &pb.RemovePodSandboxRequest{PodSandboxId: id})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "removing pod sandbox %q: %v\n", id, err)
			failed = append(failed, id)
			continue
		}
		fmt.Printf("Removed sandbox %s\n", id)
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not remove %s", strings.Join(failed, ", "))
	}
	return nil
}

func images(opts options, args []string) error {
	set, err := onlyFlags("images", args, "-q|--quiet")
	if err != nil {
		return err
	}
	c, done, err := imageClient(opts)
	if err != nil {
		return err
	}
	defer done()
	cx, cancel := ctx(opts)
	defer cancel()
	r, err := c.ListImages(cx, &pb.ListImagesRequest{})
	if err != nil {
		return fmt.Errorf("list images: %w", err)
	}
	l := listing{header: "IMAGE\tIMAGE ID\tSIZE"}
	for _, img := range r.Images {
		for _, t := range img.RepoTags {
			l.add(img.Id, fmt.Sprintf("%s\t%.20s\t%d", t, img.Id, img.Size_))
		}
	}
	return l.print(set["-q"])
}

func inspectImages(opts options, refs []string) error {
	if len(refs) == 0 {
		return fmt.Errorf("inspecti: no image given")
	}
	c, done, err := imageClient(opts)
	if err != nil {
		return err
	}
	defer done()
	for _, ref := range refs {
		cx, cancel := ctx(opts)
		r, err := c.ImageStatus(cx, &pb.ImageStatusRequest{Image: &pb.ImageSpec{Image: ref}})
		cancel()
		if err != nil {
			return fmt.Errorf("image status of %q: %w", ref, err)
		}
		if r.Image == nil {
			return fmt.Errorf("no such image %q present", ref)
		}
		if err := printJSON(map[string]interface{}{"status": r.Image}); err != nil {
			return err
		}
	}
	return nil
}

func pull(opts options, args []string) error {
	auth := &pb.AuthConfig{}
	var refs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		flag, value, hasValue := strings.Cut(a, "=")
		switch flag {
		case "--auth", "--creds":
			if !hasValue {
				if i+1 >= len(args) {
					return fmt.Errorf("flag %s needs a value", flag)
				}
				i++
				value = args[i]
			}
			if flag == "--auth" {
				auth.Auth = value
			} else {
				user, pass, ok := strings.Cut(value, ":")
				if !ok {
					return fmt.Errorf("--creds must be USER:PASSWORD")
				}
				auth.Username, auth.Password = user, pass
			}
		default:
			if strings.HasPrefix(a, "-") {
				return fmt.Errorf("flag %q is not implemented by this stand-in", a)
			}
			refs = append(refs, a)
		}
	}
	if len(refs) != 1 {
		return fmt.Errorf("pull: give exactly one image")
	}
	c, done, err := imageClient(opts)
	if err != nil {
		return err
	}
	defer done()
	req := &pb.PullImageRequest{Image: &pb.ImageSpec{Image: refs[0]}}
	if auth.Auth != "" || auth.Username != "" {
		req.Auth = auth
	}
	// Pulls take longer than the other calls: at least two minutes.
	timeout := opts.timeout
	if timeout < 2*time.Minute {
		timeout = 2 * time.Minute
	}
	cx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := c.PullImage(cx, req)
	if err != nil {
		return fmt.Errorf("pulling image %q: %w", refs[0], err)
	}
	fmt.Printf("Image is up to date for %s\n", r.ImageRef)
	return nil
}
