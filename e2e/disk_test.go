package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kahunago/kahuna"
	"github.com/kahunago/kahuna/internal/testport"
)

// TestDiskFull runs a node on a small tmpfs: when the disk fills up it
// refuses new persistent locks with MustRetry and the reason (long before
// the disk is full), lifts the refusal once space returns, and a restart
// on a disk short of space refuses with one clear line and exit code 3.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	disk := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", disk).CombinedOutput(); err != nil {
		why := fmt.Sprintf("mount -t tmpfs: %v: %s", err, bytes.TrimSpace(out))
		switch {
		case os.Geteuid() != 0:
			t.Skipf("skipped: mounting the small tmpfs this test fills needs root, and it runs as uid %d (%s)", os.Geteuid(), why)
		case os.Getenv("CI") != "":
			// CI runs as root and can mount: a skip there would hide the test.
			t.Fatalf("running as root in CI, yet the tmpfs could not be mounted: %s", why)
		default:
			t.Skipf("skipped: running as root, but this machine refuses the tmpfs mount (no CAP_SYS_ADMIN, as in an unprivileged container?): %s", why)
		}
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", disk).Run() })
	bin := build(t)
	httpPort := testport.Port(t)
	args := []string{
		"--http-ports", strconv.Itoa(httpPort),
		"--grpc-cleartext-ports", strconv.Itoa(testport.Port(t)),
		"--raft-port", strconv.Itoa(testport.Port(t)),
		"--storage-path", filepath.Join(disk, "data"),
		"--initial-cluster-partitions", "2",
		"--disk-reserve", "32MiB",
	}
	endpoint := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	node := startNode(t, bin, "kahuna", httpPort, args...)
	node.waitReady()
	lock := func(res string) (st kahuna.Status, reason string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"resource": res, "owner": []byte("o"), "expiresMs": 60000, "durability": int(kahuna.Persistent)})
		resp, err := http.Post(endpoint+"/v1/locks/try-lock", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Type   kahuna.Status `json:"type"`
			Reason string        `json:"reason"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r.Type, r.Reason
	}
	if st, why := lock("before"); st != kahuna.Locked {
		t.Fatalf("lock with space: %v %s", st, why)
	}

	// Fill the disk to 16 MiB short of the reserve's end.
	ballast := filepath.Join(disk, "ballast")
	fill(t, ballast, disk, 16<<20)
	var st kahuna.Status
	var why string
	// The guard measures every second: grants go on until it has.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		st, why = lock("during-" + strconv.Itoa(i))
		if st == kahuna.MustRetry || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st != kahuna.MustRetry || !strings.Contains(why, "below the reserve") {
		t.Fatalf("lock short of space: %v %q, want MustRetry with the reason", st, why)
	}
	t.Logf("short of space: %v: %s", st, why)
	metrics := get(t, endpoint+"/metrics")
	if !strings.Contains(metrics, "kahuna_disk_quota_exceeded 1") {
		t.Fatalf("metrics do not show the refusal:\n%s", grepLines(metrics, "kahuna_disk"))
	}

	if r := ctl(t, bin, "status", "--endpoints", endpoint).want(t, exitError); !strings.Contains(r.stdout, "no-space") || !strings.Contains(r.stdout, "refuses new persistent locks: no space") {
		t.Fatalf("kahunactl status does not show the refusal: %s", r)
	}

	// Space returns: grants resume.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for st, why = lock("after"); st != kahuna.Locked && time.Now().Before(deadline); st, why = lock("after") {
		time.Sleep(100 * time.Millisecond)
	}
	if st != kahuna.Locked {
		t.Fatalf("lock once space returned: %v %s", st, why)
	}
	if code := node.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code after SIGTERM: %d", code)
	}

	// A restart on a disk short of space refuses, once, saying why.
	fill(t, ballast, disk, 16<<20)
	node = startNode(t, bin, "kahuna (no space)", httpPort, args...)
	if code := node.wait(); code != 3 {
		t.Fatalf("start short of space: exit code %d, want 3:\n%s", code, node.stderr)
	}
	if s := strings.TrimSpace(node.stderr.String()); !strings.Contains(s, "refusing to start") || !strings.Contains(s, "below the reserve") {
		t.Fatalf("start short of space: %q does not say why", s)
	}
}

// fill writes ballast until the file system of dir has about left bytes free.
func fill(t *testing.T, ballast, dir string, left uint64) {
	t.Helper()
	f, err := os.Create(ballast)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for freeBytes(t, dir) > left+uint64(len(chunk)) {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
}

func freeBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
