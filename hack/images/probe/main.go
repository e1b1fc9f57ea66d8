// The node self-test's client, run as a Pod by `hack/node.sh check`: it proves that the cluster
// DNS answers, that the API server is reachable through the `kubernetes` Service with the Pod's
// ServiceAccount token, and that an HTTP endpoint (moto) is reachable. Standard library only, so
// it builds offline into a static binary.
//
//	probe dns NAME | kube | http URL | sleep   (checks run in order; the first failure exits 1)
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	args := os.Args[1:]
	for len(args) > 0 {
		var err error
		switch args[0] {
		case "dns":
			err = dns(arg(args, 1))
			args = args[2:]
		case "kube":
			err = kube()
			args = args[1:]
		case "http":
			err = get(&http.Client{Timeout: 10 * time.Second}, arg(args, 1), "")
			args = args[2:]
		case "sleep":
			for {
				time.Sleep(time.Hour)
			}
		default:
			err = fmt.Errorf("unknown check %q", args[0])
			args = nil
		}
		if err != nil {
			fmt.Println("FAIL", err)
			os.Exit(1)
		}
	}
	fmt.Println("ALL OK")
}

func arg(args []string, i int) string {
	if i >= len(args) {
		fmt.Println("FAIL missing argument after", args[0])
		os.Exit(2)
	}
	return args[i]
}

// dns resolves NAME through the Pod's resolv.conf (the cluster DNS Service), retrying while
// CoreDNS starts.
func dns(name string) error {
	var err error
	for i := 0; i < 30; i++ {
		var addrs []string
		if addrs, err = net.LookupHost(name); err == nil {
			fmt.Printf("ok dns %s -> %s\n", name, strings.Join(addrs, ","))
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("dns %s: %w", name, err)
}

// kube calls the API server as the Pod's ServiceAccount through the `kubernetes` Service, by its
// ClusterIP (the environment variables kubelet sets) and by its DNS name.
func kube() error {
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return err
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s/ca.crt", saDir)
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	hostPort := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	for _, url := range []string{"https://" + hostPort + "/api", "https://kubernetes.default.svc/api"} {
		if err := get(client, url, string(token)); err != nil {
			return err
		}
	}
	return nil
}

// get succeeds on any HTTP answer below 400: the server was reached and accepted the request.
func get(client *http.Client, url, token string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	fmt.Printf("ok GET %s -> %s\n", url, resp.Status)
	return nil
}
