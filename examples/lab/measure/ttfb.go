package measure

import (
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
)

// Modes of a fetch: the GET went direct (a port no whitelist names), or
// through the agents with the client-side agent's warm pool empty (no
// pool configured) or filled.
const (
	FetchDirect = "direct"
	FetchCold   = "sos-cold"
	FetchWarm   = "sos-warm"
)

// Fetch is one HTTP GET from the lab's client, timed by curl.
type Fetch struct {
	Mode string
	// Lab is the lab the fetch ran in ("cold": no pool block, "warm": a
	// pool toward the server-side agent); a mode's ratio is taken against
	// the direct fetches of the same lab.
	Lab  string
	Size int64 // bytes asked for
	Run  int   // 1-based
	// Seconds from curl's start: TCP connected, first byte of the
	// response, last byte.
	Connect, FirstByte, Total float64
	Bytes                     int64 // received
}

// MaxObject bounds the objects the fetch server serves.
const MaxObject = 64 << 20

// ObjectServer serves GET /bytes/N: N pseudo-random bytes (N at most
// MaxObject), from memory, so the server's disk plays no part.
type ObjectServer struct{ data []byte }

// NewObjectServer makes the server's content.
func NewObjectServer(largest int64) (*ObjectServer, error) {
	if largest < 0 || largest > MaxObject {
		return nil, fmt.Errorf("object of %d bytes: at most %d", largest, MaxObject)
	}
	data := make([]byte, largest)
	r := rand.NewChaCha8([32]byte{'t', 't', 'f', 'b'})
	_, _ = r.Read(data)
	return &ObjectServer{data: data}, nil
}

func (s *ObjectServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64)
	if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/bytes/") || err != nil || n < 0 || n > int64(len(s.data)) {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(s.data[:n])
}

// curlFormat is what curl prints after a transfer (-w).
const curlFormat = "%{time_connect} %{time_starttransfer} %{time_total} %{size_download} %{http_code}"

// Get fetches url from the lab's client with curl: one new connection, one
// GET, the body discarded.
func Get(ctx context.Context, lab *labnet.Lab, url string) (Fetch, error) {
	out, err := lab.Run(ctx, labnet.Client, "curl", "-sS", "--max-time", "60", "-o", "/dev/null", "-w", curlFormat, url)
	if err != nil {
		return Fetch{}, fmt.Errorf("curl %s: %w: %s", url, err, strings.TrimSpace(out))
	}
	return parseCurl(out)
}

func parseCurl(out string) (Fetch, error) {
	var f Fetch
	var code int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "%g %g %g %d %d", &f.Connect, &f.FirstByte, &f.Total, &f.Bytes, &code); err != nil {
		return Fetch{}, fmt.Errorf("curl printed %q: %w", out, err)
	}
	if code != http.StatusOK {
		return Fetch{}, fmt.Errorf("HTTP status %d", code)
	}
	return f, nil
}

// PoolState is a client-side agent's warm pool as its status shows it.
type PoolState struct {
	Peer    string `json:"peer"`
	Idle    int    `json:"idle"`
	Target  int    `json:"target"`
	Claims  uint64 `json:"claims"`
	Misses  uint64 `json:"misses"`
	Refills uint64 `json:"refills"`
	Died    uint64 `json:"died"`
}

// Pool reads node's pool toward peer (a far agent's name) from its status.
func Pool(ctx context.Context, lab *labnet.Lab, node, peer string) (PoolState, bool, error) {
	out, err := lab.Status(ctx, node)
	if err != nil {
		return PoolState{}, false, err
	}
	var st struct {
		Pools []PoolState `json:"pools"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return PoolState{}, false, fmt.Errorf("status of %s: %w", node, err)
	}
	for _, p := range st.Pools {
		if p.Peer == peer {
			return p, true, nil
		}
	}
	return PoolState{}, false, nil
}

var fetchHeader = []string{"mode", "lab", "size_bytes", "run", "connect_s", "first_byte_s", "total_s", "bytes"}

// WriteFetchCSV writes the fetches, one row each, with a header.
func WriteFetchCSV(w io.Writer, fs []Fetch) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(fetchHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 6, 64) }
	for _, x := range fs {
		if err := cw.Write([]string{x.Mode, x.Lab, strconv.FormatInt(x.Size, 10), strconv.Itoa(x.Run),
			f(x.Connect), f(x.FirstByte), f(x.Total), strconv.FormatInt(x.Bytes, 10)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadFetchCSV reads what WriteFetchCSV wrote.
func ReadFetchCSV(r io.Reader) ([]Fetch, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("fetch csv: %w", err)
	}
	if len(rows) == 0 || !slices.Equal(rows[0], fetchHeader) {
		return nil, fmt.Errorf("fetch csv: header %v, want %v", rows[:min(len(rows), 1)], fetchHeader)
	}
	var out []Fetch
	for i, row := range rows[1:] {
		x := Fetch{Mode: row[0], Lab: row[1]}
		var errs [7]error
		x.Size, errs[0] = strconv.ParseInt(row[2], 10, 64)
		x.Run, errs[1] = strconv.Atoi(row[3])
		x.Connect, errs[2] = strconv.ParseFloat(row[4], 64)
		x.FirstByte, errs[3] = strconv.ParseFloat(row[5], 64)
		x.Total, errs[4] = strconv.ParseFloat(row[6], 64)
		x.Bytes, errs[5] = strconv.ParseInt(row[7], 10, 64)
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("fetch csv row %d: %w", i+2, err)
			}
		}
		out = append(out, x)
	}
	return out, nil
}

// FetchCell is the summary of one size and mode in one lab, with its
// ratios against the direct fetches of the same size in the same lab.
type FetchCell struct {
	Mode, Lab        string
	Size             int64
	FirstByte, Total Summary
	// FirstByteRatio and TotalRatio are the medians' ratios to direct;
	// zero for direct itself or when there is no direct baseline.
	FirstByteRatio, TotalRatio float64
}

// SummariseFetches returns one cell per (lab, mode, size), in the order
// they first appear, sizes ascending within it.
func SummariseFetches(fs []Fetch) []FetchCell {
	type k struct {
		lab, mode string
		size      int64
	}
	ttfb, total := map[k][]float64{}, map[k][]float64{}
	var order []k
	for _, x := range fs {
		key := k{x.Lab, x.Mode, x.Size}
		if _, ok := ttfb[key]; !ok {
			order = append(order, key)
		}
		ttfb[key] = append(ttfb[key], x.FirstByte)
		total[key] = append(total[key], x.Total)
	}
	slices.SortStableFunc(order, func(a, b k) int { return cmp.Compare(a.size, b.size) })
	var out []FetchCell
	for _, key := range order {
		c := FetchCell{Mode: key.mode, Lab: key.lab, Size: key.size, FirstByte: Summarise(ttfb[key]), Total: Summarise(total[key])}
		if key.mode != FetchDirect {
			d := k{key.lab, FetchDirect, key.size}
			if dt := Summarise(ttfb[d]); dt.N > 0 && dt.Median > 0 {
				c.FirstByteRatio = c.FirstByte.Median / dt.Median
			}
			if dt := Summarise(total[d]); dt.N > 0 && dt.Median > 0 {
				c.TotalRatio = c.Total.Median / dt.Median
			}
		}
		out = append(out, c)
	}
	return out
}

// secs prints a summary of seconds: "0.412 (0.405-0.431)".
func secs(s Summary) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f (%.3f-%.3f)", s.Median, s.Min, s.Max)
}

func ratio(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
}

// SizeName prints a byte count the way the benchmark names its objects
// (decimal units).
func SizeName(n int64) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%d MB", n/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%d kB", n/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// WriteFetchTable prints time to first byte and total time per size and
// mode: medians with the range in seconds, and each sosappliance mode's
// ratio against direct in the same lab.
func WriteFetchTable(w io.Writer, fs []Fetch) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "size\tmode\tlab\tn\tfirst byte s\tvs direct\ttotal s\tvs direct\t")
	for _, c := range SummariseFetches(fs) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", SizeName(c.Size), c.Mode, c.Lab, c.FirstByte.N,
			secs(c.FirstByte), ratio(c.FirstByteRatio), secs(c.Total), ratio(c.TotalRatio))
	}
	return tw.Flush()
}
