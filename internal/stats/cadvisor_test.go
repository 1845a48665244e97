package stats

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadContainerCgroup: a container's cgroup found through its process
// and read as cAdvisor reads it, on both cgroup versions: limits that are
// "unlimited" become 0, cpuacct.stat ticks become seconds, cpu.weight
// becomes shares, and block I/O is per device.
func TestReadContainerCgroup(t *testing.T) {
	const ctr = "/kubepods/podu/c1"
	for _, tc := range []struct {
		name   string
		files  map[string]string
		want   map[*prometheus.Desc]float64
		blkio  blkioDevice
		faults float64
	}{
		{
			name: "v1",
			files: map[string]string{
				"proc/42/cgroup": "8:pids:" + ctr + "\n7:blkio:" + ctr + "\n4:memory:" + ctr + "\n2:cpuacct:" + ctr + "\n1:cpu:" + ctr + "\n0::/\n",
				"cgroup/cpuacct" + ctr + "/cpuacct.usage":                 "2500000000\n",
				"cgroup/cpuacct" + ctr + "/cpuacct.stat":                  "user 150\nsystem 50\n",
				"cgroup/cpu" + ctr + "/cpu.cfs_period_us":                 "100000\n",
				"cgroup/cpu" + ctr + "/cpu.cfs_quota_us":                  "-1\n",
				"cgroup/cpu" + ctr + "/cpu.shares":                        "2\n",
				"cgroup/cpu" + ctr + "/cgroup.procs":                      "42\n43\n",
				"cgroup/cpu" + ctr + "/tasks":                             "42\n43\n44\n",
				"cgroup/memory" + ctr + "/memory.usage_in_bytes":          "5000000\n",
				"cgroup/memory" + ctr + "/memory.max_usage_in_bytes":      "6000000\n",
				"cgroup/memory" + ctr + "/memory.failcnt":                 "0\n",
				"cgroup/memory" + ctr + "/memory.limit_in_bytes":          "79998976\n",
				"cgroup/memory" + ctr + "/memory.soft_limit_in_bytes":     "9223372036854771712\n",
				"cgroup/memory" + ctr + "/memory.memsw.limit_in_bytes":    "79998976\n",
				"cgroup/memory" + ctr + "/memory.stat":                    "cache 9\npgfault 300\npgmajfault 1\ntotal_cache 1000000\ntotal_rss 2000000\ntotal_mapped_file 4096\ntotal_swap 0\ntotal_inactive_file 500000\ntotal_pgfault 310\ntotal_pgmajfault 2\n",
				"cgroup/memory" + ctr + "/memory.oom_control":             "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
				"cgroup/pids" + ctr + "/pids.max":                         "max\n",
				"cgroup/blkio" + ctr + "/blkio.throttle.io_service_bytes": "8:0 Read 4096\n8:0 Write 8192\n8:0 Total 12288\nTotal 12288\n",
				"cgroup/blkio" + ctr + "/blkio.throttle.io_serviced":      "8:0 Read 1\n8:0 Write 2\n8:0 Total 3\nTotal 3\n",
			},
			want: map[*prometheus.Desc]float64{
				cadCPUUsage: 2.5, cadCPUUser: 1.5, cadCPUSystem: 0.5, cadCPUPeriod: 100000, cadCPUShares: 2,
				cadMemUsage: 5000000, cadMemMax: 6000000, cadMemWorking: 4500000, cadMemCache: 1000000, cadMemRSS: 2000000,
				cadMemMapped: 4096, cadMemSwap: 0, cadMemFailcnt: 0, cadOOMEvents: 0,
				cadMemLimit: 79998976, cadMemReserve: 0, cadSwapLimit: 79998976,
				cadProcesses: 2, cadThreads: 3, cadThreadsMax: 0,
			},
			blkio:  blkioDevice{major: "8", minor: "0", readBytes: 4096, writeBytes: 8192, reads: 1, writes: 2, hasBytes: true, hasOps: true},
			faults: 310,
		},
		{
			name: "v2",
			files: map[string]string{
				"proc/42/cgroup":                        "0::" + ctr + "\n",
				"cgroup" + ctr + "/cpu.stat":            "usage_usec 2500000\nuser_usec 1500000\nsystem_usec 1000000\n",
				"cgroup" + ctr + "/cpu.max":             "max 100000\n",
				"cgroup" + ctr + "/cpu.weight":          "1\n",
				"cgroup" + ctr + "/cgroup.procs":        "42\n",
				"cgroup" + ctr + "/cgroup.threads":      "42\n43\n",
				"cgroup" + ctr + "/memory.current":      "5000000\n",
				"cgroup" + ctr + "/memory.max":          "79998976\n",
				"cgroup" + ctr + "/memory.low":          "0\n",
				"cgroup" + ctr + "/memory.swap.max":     "max\n",
				"cgroup" + ctr + "/memory.swap.current": "0\n",
				"cgroup" + ctr + "/memory.stat":         "anon 2000000\nfile 1000000\nfile_mapped 4096\ninactive_file 500000\npgfault 310\npgmajfault 2\n",
				"cgroup" + ctr + "/memory.events":       "low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n",
				"cgroup" + ctr + "/pids.max":            "100\n",
				"cgroup" + ctr + "/io.stat":             "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n",
			},
			want: map[*prometheus.Desc]float64{
				cadCPUUsage: 2.5, cadCPUUser: 1.5, cadCPUSystem: 1, cadCPUPeriod: 100000, cadCPUShares: 2,
				cadMemUsage: 5000000, cadMemWorking: 4500000, cadMemCache: 1000000, cadMemRSS: 2000000,
				cadMemMapped: 4096, cadMemSwap: 0, cadMemFailcnt: 3, cadOOMEvents: 0,
				cadMemLimit: 79998976, cadMemReserve: 0, cadSwapLimit: 0,
				cadProcesses: 1, cadThreads: 2, cadThreadsMax: 100,
			},
			blkio:  blkioDevice{major: "8", minor: "0", readBytes: 4096, writeBytes: 8192, reads: 1, writes: 2, hasBytes: true, hasOps: true},
			faults: 310,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, tc.files)
			cg, err := readContainerCgroup(filepath.Join(root, "proc"), filepath.Join(root, "cgroup"), 42)
			if err != nil {
				t.Fatal(err)
			}
			if cg.id != ctr {
				t.Errorf("id %q, want %q", cg.id, ctr)
			}
			for d, want := range tc.want {
				if got, ok := cg.vals[d]; !ok || got != want {
					t.Errorf("%s = %v (present %v), want %v", d, got, ok, want)
				}
			}
			if len(cg.blkio) != 1 || cg.blkio[0] != tc.blkio {
				t.Errorf("blkio %+v, want [%+v]", cg.blkio, tc.blkio)
			}
			if got := cg.failures[[2]string{"pgfault", "hierarchy"}]; got != tc.faults {
				t.Errorf("pgfault hierarchy = %v, want %v", got, tc.faults)
			}
		})
	}
}
