package measure

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseCurl(t *testing.T) {
	f, err := parseCurl("0.000412 0.210329 1.500785 1000000 200\n")
	if err != nil {
		t.Fatal(err)
	}
	if f.Connect != 0.000412 || f.FirstByte != 0.210329 || f.Total != 1.500785 || f.Bytes != 1000000 {
		t.Errorf("parsed %+v", f)
	}
	for _, bad := range []string{"", "0.1 0.2", "0.1 0.2 0.3 10 404"} {
		if _, err := parseCurl(bad); err == nil {
			t.Errorf("curl output %q: no error", bad)
		}
	}
}

func TestFetchCSVRoundTripAndRatios(t *testing.T) {
	var fs []Fetch
	for run := 1; run <= 3; run++ {
		d := float64(run) / 1000
		fs = append(fs,
			Fetch{Mode: FetchDirect, Lab: "warm", Size: 1000, Run: run, Connect: 0.2, FirstByte: 0.4 + d, Total: 0.4 + d, Bytes: 1000},
			Fetch{Mode: FetchWarm, Lab: "warm", Size: 1000, Run: run, Connect: 0.0005, FirstByte: 0.2 + d, Total: 0.2 + d, Bytes: 1000},
			Fetch{Mode: FetchDirect, Lab: "cold", Size: 100, Run: run, FirstByte: 0.4, Total: 0.6, Bytes: 100},
			Fetch{Mode: FetchCold, Lab: "cold", Size: 100, Run: run, FirstByte: 0.8, Total: 1.2, Bytes: 100},
		)
	}
	var b bytes.Buffer
	if err := WriteFetchCSV(&b, fs); err != nil {
		t.Fatal(err)
	}
	back, err := ReadFetchCSV(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, fs) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", back, fs)
	}
	cells := SummariseFetches(fs)
	if len(cells) != 4 || cells[0].Size != 100 || cells[3].Size != 1000 {
		t.Fatalf("cells %+v: want four, smaller sizes first", cells)
	}
	for _, c := range cells {
		switch c.Mode {
		case FetchWarm:
			if c.FirstByte.Median != 0.202 || c.FirstByteRatio < 0.49 || c.FirstByteRatio > 0.51 {
				t.Errorf("warm cell %+v: want median 0.202, ratio 0.202/0.402", c)
			}
		case FetchCold:
			if c.FirstByteRatio != 2 || c.TotalRatio != 2 {
				t.Errorf("cold cell %+v: ratios against the cold lab's direct, want 2", c)
			}
		case FetchDirect:
			if c.FirstByteRatio != 0 {
				t.Errorf("direct cell has a ratio: %+v", c)
			}
		}
	}
	var table strings.Builder
	if err := WriteFetchTable(&table, fs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1 kB", "100 B", "0.202 (0.201-0.203)", "0.50x", "2.00x"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if _, err := ReadFetchCSV(strings.NewReader("mode,lab\n")); err == nil {
		t.Error("a CSV with another header was read")
	}
}

func TestObjectServer(t *testing.T) {
	s, err := NewObjectServer(1000)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	for path, want := range map[string]int{"/bytes/1000": 1000, "/bytes/0": 0, "/bytes/1001": -1, "/bytes/x": -1, "/other": -1} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case want < 0 && resp.StatusCode != http.StatusNotFound:
			t.Errorf("GET %s: %s, want 404", path, resp.Status)
		case want >= 0 && (resp.StatusCode != http.StatusOK || len(body) != want):
			t.Errorf("GET %s: %s with %d bytes, want %d", path, resp.Status, len(body), want)
		}
	}
	if _, err := NewObjectServer(MaxObject + 1); err == nil {
		t.Error("an object above MaxObject was accepted")
	}
}

// keptResults lists the files under examples/lab/results matching
// pattern, failing the test when there are none.
func keptResults(t *testing.T, pattern string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "results", pattern))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no %s under examples/lab/results", pattern)
	}
	return paths
}

// TestTTFBResults: every bench-ttfb CSV kept under examples/lab/results
// reads back and has a warm and a direct cell for each size.
func TestTTFBResults(t *testing.T) {
	for _, path := range keptResults(t, "bench-ttfb-*.csv") {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := ReadFetchCSV(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		warm := 0
		for _, c := range SummariseFetches(fs) {
			if c.Mode == FetchWarm && c.FirstByteRatio > 0 {
				warm++
			}
		}
		if warm == 0 {
			t.Errorf("%s: no warm-pool cell with a direct baseline", path)
		}
	}
}
