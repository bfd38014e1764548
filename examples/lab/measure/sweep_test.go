package measure

import (
	"bytes"
	"encoding/csv"
	"image/png"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestCSVRoundTripAndTable(t *testing.T) {
	points := []Point{
		{Mode: ModeDirect, Streams: 1, Result: Result{ReceivedBps: 92.4e6, SentBps: 93e6, Retransmits: 12, Bytes: 115500000, Seconds: 10.02}, SwitchDropsRead: true},
		{Mode: ModeParallel, Streams: 1, Result: Result{ReceivedBps: 90e6, SentBps: 90e6, Bytes: 1, Seconds: 10}},
		{Mode: ModeSosappliance, Streams: 1, ChunkSize: 60000, Result: Result{ReceivedBps: 80e6, SentBps: 81e6, Bytes: 2, Seconds: 10}},
		{Mode: ModeParallel, Streams: 64, Result: Result{ReceivedBps: 435e6, SentBps: 440e6, Retransmits: 3000, Bytes: 3, Seconds: 10.2}},
		{Mode: ModeSosappliance, Streams: 64, ChunkSize: 10000, Result: Result{ReceivedBps: 401e6, SentBps: 402e6, Bytes: 4, Seconds: 10.1}},
		{Mode: ModeSosappliance, Streams: 64, ChunkSize: 60000, Result: Result{ReceivedBps: 451.26e6, SentBps: 452e6, Bytes: 5, Seconds: 10.1}, SwitchDrops: 17, SwitchDropsRead: true,
			WAN: WANCounts{Received: 125000, QueueDrops: 8230, LossDrops: 119}, WANRead: true},
	}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, points); err != nil {
		t.Fatal(err)
	}
	wantCSV := `mode,streams,chunk_size,concurrent,run,throughput_mbps,sent_mbps,retransmits,bytes,seconds,min_connection_mbps,max_connection_mbps,jain_fairness,switch_drops,wan_frames,wan_queue_drops,wan_loss_drops
direct,1,,1,1,92.4,93.0,12,115500000,10.02,,,,0,,,
parallel,1,,1,1,90.0,90.0,0,1,10.00,,,,,,,
sosappliance,1,60000,1,1,80.0,81.0,0,2,10.00,,,,,,,
parallel,64,,1,1,435.0,440.0,3000,3,10.20,,,,,,,
sosappliance,64,10000,1,1,401.0,402.0,0,4,10.10,,,,,,,
sosappliance,64,60000,1,1,451.3,452.0,0,5,10.10,,,,17,125000,8230,119
`
	if buf.String() != wantCSV {
		t.Errorf("csv:\n%s\nwant:\n%s", buf.String(), wantCSV)
	}
	back, err := ReadCSV(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(points) || back[5].ChunkSize != 60000 || back[3].Result.Retransmits != 3000 || back[0].Result.ReceivedBps != 92.4e6 ||
		back[5].SwitchDrops != 17 || !back[5].SwitchDropsRead || back[1].SwitchDropsRead || !back[0].SwitchDropsRead || back[0].SwitchDrops != 0 ||
		!back[5].WANRead || back[5].WAN != points[5].WAN || back[0].WANRead {
		t.Errorf("read back %+v", back)
	}
	if got := back[5].WAN.QueueDropShare(); got != 8230.0/125000 {
		t.Errorf("queue drop share %v", got)
	}
	// Results written before the WAN's counts still read, those unknown.
	v2, err := ReadCSV(strings.NewReader("mode,streams,chunk_size,concurrent,run,throughput_mbps,sent_mbps,retransmits,bytes,seconds,min_connection_mbps,max_connection_mbps,jain_fairness,switch_drops\n" +
		"sosappliance,8,60000,1,1,470.1,480.0,9,1,15.00,,,,3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(v2) != 1 || v2[0].SwitchDrops != 3 || v2[0].WANRead {
		t.Errorf("read back a file without the WAN's counts: %+v", v2)
	}
	// Results written before switch_drops still read, the drops unknown.
	old, err := ReadCSV(strings.NewReader("mode,streams,chunk_size,concurrent,run,throughput_mbps,sent_mbps,retransmits,bytes,seconds,min_connection_mbps,max_connection_mbps,jain_fairness\n" +
		"sosappliance,8,60000,1,1,470.1,480.0,9,1,15.00,,,\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != 1 || old[0].Streams != 8 || old[0].Result.ReceivedBps != 470.1e6 || old[0].SwitchDropsRead {
		t.Errorf("read back an old file: %+v", old)
	}

	var table bytes.Buffer
	if err := WriteTable(&table, back); err != nil {
		t.Fatal(err)
	}
	wantTable := `direct, 1 TCP connection: 92 Mbit/s

  streams  iperf3 -P N  sos chunk 10000  sos chunk 60000
        1           90                -               80
       64          435              401              451
`
	if table.String() != wantTable {
		t.Errorf("table:\n%s\nwant:\n%s", table.String(), wantTable)
	}

	// The WAN's queue drops, in percent, for the cells that have them.
	table.Reset()
	if err := WriteQueueDropTable(&table, back); err != nil {
		t.Fatal(err)
	}
	wantTable = `frames dropped by the WAN's queue, % of the transfer's frames:

  streams  iperf3 -P N  sos chunk 10000  sos chunk 60000
        1            -                -                -
       64            -                -              6.6
`
	if table.String() != wantTable {
		t.Errorf("queue drop table:\n%s\nwant:\n%s", table.String(), wantTable)
	}
	table.Reset()
	if err := WriteQueueDropTable(&table, old); err != nil || table.Len() != 0 {
		t.Errorf("queue drop table of results without the WAN's counts: %q, %v", table.String(), err)
	}
}

func TestReadCSVRejectsOtherFiles(t *testing.T) {
	for _, in := range []string{"", "a,b\n1,2\n",
		// the header before the sharing sweep
		"mode,streams,chunk_size,throughput_mbps,sent_mbps,retransmits,bytes,seconds\ndirect,1,,1,1,0,0,1\n",
		"mode,streams,chunk_size,concurrent,run,throughput_mbps,sent_mbps,retransmits,bytes,seconds,min_connection_mbps,max_connection_mbps,jain_fairness\ndirect,x,,1,1,1,1,0,0,1,,,\n",
		"mode,streams,chunk_size,concurrent,run,throughput_mbps,sent_mbps,retransmits,bytes,seconds,min_connection_mbps,max_connection_mbps,jain_fairness,switch_drops\ndirect,1,,1,1,1,1,0,0,1,,,,many\n",
		"mode,streams,chunk_size,concurrent,run,throughput_mbps,sent_mbps,retransmits,bytes,seconds,min_connection_mbps,max_connection_mbps,jain_fairness,switch_drops\ndirect,1,,1,1,1,1,0,0,1,,,,-5\n",
		"mode,streams,chunk_size,concurrent,run,throughput_mbps,sent_mbps,retransmits,bytes,seconds,min_connection_mbps,max_connection_mbps,jain_fairness,switch_drops,wan_frames,wan_queue_drops,wan_loss_drops\ndirect,1,,1,1,1,1,0,0,1,,,,0,100,x,0\n",
		// drops without the frames they are a share of
		"mode,streams,chunk_size,concurrent,run,throughput_mbps,sent_mbps,retransmits,bytes,seconds,min_connection_mbps,max_connection_mbps,jain_fairness,switch_drops,wan_frames,wan_queue_drops,wan_loss_drops\ndirect,1,,1,1,1,1,0,0,1,,,,0,,20,0\n"} {
		if _, err := ReadCSV(strings.NewReader(in)); err == nil {
			t.Errorf("ReadCSV(%q) accepted it", in)
		}
	}
}

func TestParseReadsIperfJSON(t *testing.T) {
	report := []byte(`{"start":{"connected":[{"socket":5,"local_host":"10.10.1.10","local_port":40000,"remote_host":"10.10.2.10","remote_port":5201}]},
"end":{"streams":[{"sender":{"bits_per_second":6e8},"receiver":{"bits_per_second":5.8e8}},{"sender":{"bits_per_second":4e8},"receiver":{"bits_per_second":3.8e8}}],
"sum_sent":{"start":0,"end":10,"seconds":10,"bytes":1250000000,"bits_per_second":1e9,"retransmits":7,"sender":true},
"sum_received":{"start":0,"end":10.2,"seconds":10.2,"bytes":1224000000,"bits_per_second":9.6e8,"sender":true}},
"intervals":[{"sum":{"start":0,"end":1,"bits_per_second":1e8,"omitted":true}},{"sum":{"start":0,"end":1.0001,"bits_per_second":9e8,"omitted":false}}],
"server_output_json":{"intervals":[{"sum":{"start":0,"end":1,"bits_per_second":5e7,"omitted":true}},
{"sum":{"start":0,"end":1,"bits_per_second":8e8,"omitted":false}},{"sum":{"start":1,"end":2.003,"bits_per_second":9.5e8,"omitted":false}}]}}`)
	r, err := Parse(report)
	if err != nil {
		t.Fatal(err)
	}
	if r.ReceivedBps != 9.6e8 || r.SentBps != 1e9 || r.Retransmits != 7 || r.Bytes != 1224000000 || r.Seconds != 10.2 ||
		len(r.PerConnectionBps) != 2 || r.PerConnectionBps[0] != 5.8e8 || r.PerConnectionBps[1] != 3.8e8 {
		t.Errorf("%+v", r)
	}
	wantServer := []Interval{{Start: 0, End: 1, Bps: 8e8}, {Start: 1, End: 2.003, Bps: 9.5e8}}
	if !slices.Equal(r.ServerSeconds, wantServer) || !slices.Equal(r.ReceiverSeconds(), wantServer) ||
		!slices.Equal(r.ClientSeconds, []Interval{{Start: 0, End: 1.0001, Bps: 9e8}}) {
		t.Errorf("per-second rates: server %v, client %v", r.ServerSeconds, r.ClientSeconds)
	}
	r.Reverse = true
	if !slices.Equal(r.ReceiverSeconds(), r.ClientSeconds) {
		t.Errorf("under -R the receiver is the client: %v", r.ReceiverSeconds())
	}
	for _, bad := range []string{`{"error":"unable to connect to server: Connection refused"}`, `{}`, `not json`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) accepted it", bad)
		}
	}
}

func TestRunsAreSummarisedByMedianAndRange(t *testing.T) {
	pt := func(mode string, streams, chunk, run int, mbps float64) Point {
		return Point{Mode: mode, Streams: streams, ChunkSize: chunk, Run: run, Result: Result{ReceivedBps: mbps * 1e6}}
	}
	points := []Point{
		pt(ModeDirect, 1, 0, 1, 100), pt(ModeParallel, 8, 0, 1, 470), pt(ModeSosappliance, 8, 60000, 1, 440),
		pt(ModeDirect, 1, 0, 2, 106), pt(ModeParallel, 8, 0, 2, 480), pt(ModeSosappliance, 8, 60000, 2, 464),
		pt(ModeDirect, 1, 0, 3, 101), pt(ModeParallel, 8, 0, 3, 479), pt(ModeSosappliance, 8, 60000, 3, 452),
	}
	var table bytes.Buffer
	if err := WriteTable(&table, points); err != nil {
		t.Fatal(err)
	}
	want := `direct, 1 TCP connection: 101 (100-106) Mbit/s

  streams    iperf3 -P N  sos chunk 60000
        8  479 (470-480)    452 (440-464)
`
	if table.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", table.String(), want)
	}
	m := Medians(points)
	if len(m) != 3 || m[2].Result.ReceivedBps != 452e6 || m[0].Result.ReceivedBps != 101e6 {
		t.Errorf("medians %+v", m)
	}
	if s := Summarise([]float64{4, 1, 3, 2}); s.Median != 2.5 || s.Min != 1 || s.Max != 4 || s.N != 4 {
		t.Errorf("even count: %+v", s)
	}
}

func TestSharingTable(t *testing.T) {
	sessions := func(run int, per ...float64) Point {
		p := Point{Mode: ModeSosappliance, Streams: 16, ChunkSize: 60000, Concurrent: len(per), Run: run}
		for _, v := range per {
			p.Result.PerConnectionBps = append(p.Result.PerConnectionBps, v*1e6)
			p.Result.ReceivedBps += v * 1e6
		}
		return p
	}
	points := []Point{
		{Mode: ModeSosappliance, Streams: 16, ChunkSize: 60000, Run: 1, Result: Result{ReceivedBps: 400e6}},
		{Mode: ModeParallel, Streams: 4, Run: 1, Result: Result{ReceivedBps: 370e6}},
		sessions(1, 100, 100, 100, 100),
		sessions(1, 200, 50),
	}
	var buf bytes.Buffer
	if err := WriteSharingTable(&buf, points); err != nil {
		t.Fatal(err)
	}
	want := `sharing: K concurrent connections, each an sosappliance session of 16 stripes, chunk 60000; one session alone: 400 Mbit/s

  K  iperf3 -P K  sos K sessions  vs one alone  slowest  fastest  Jain
  2            -             250         0.62x       50      200  0.74
  4          370             400         1.00x      100      100  1.00
`
	if buf.String() != want {
		t.Errorf("sharing table:\n%s\nwant:\n%s", buf.String(), want)
	}
	if j := Jain([]float64{1, 0, 0, 0}); j != 0.25 {
		t.Errorf("Jain of one taking all of four = %v, want 0.25", j)
	}
	var none bytes.Buffer
	if err := WriteSharingTable(&none, points[:2]); err != nil || none.Len() != 0 {
		t.Errorf("no sharing sweep printed %q (%v)", none.String(), err)
	}
}

// TestAutoRow: the streams = "auto" cells make one row of the table, the
// rate and the stream counts the runs chose, whatever each chose; the
// median point carries the median count.
func TestAutoRow(t *testing.T) {
	pt := func(mode string, streams, chunk, run int, mbps float64) Point {
		return Point{Mode: mode, Streams: streams, ChunkSize: chunk, Run: run, Result: Result{ReceivedBps: mbps * 1e6}}
	}
	points := []Point{
		pt(ModeParallel, 16, 0, 1, 480), pt(ModeSosappliance, 16, 60000, 1, 440), pt(ModeAuto, 16, 60000, 1, 455),
		pt(ModeParallel, 16, 0, 2, 490), pt(ModeSosappliance, 16, 60000, 2, 450), pt(ModeAuto, 32, 60000, 2, 465),
	}
	var table bytes.Buffer
	if err := WriteTable(&table, points); err != nil {
		t.Fatal(err)
	}
	want := `  streams    iperf3 -P N            sos chunk 60000
       16  485 (480-490)              445 (440-450)
     auto              -  460 (455-465) @24 (16-32)
`
	if table.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", table.String(), want)
	}
	var csvb bytes.Buffer
	if err := WriteCSV(&csvb, points); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCSV(&csvb)
	if err != nil {
		t.Fatal(err)
	}
	m := Medians(back)
	if len(m) != 3 || m[2].Mode != ModeAuto || m[2].Streams != 24 || m[2].Result.ReceivedBps != 460e6 {
		t.Errorf("medians %+v", m)
	}
}

// TestBenchWANResults: every bench-wan CSV kept under examples/lab/results
// reads back, each a sweep WriteCSV wrote or an A/B file (leading columns
// build and, in later ones, rtt_ms and loss, before the sweep's own), with
// known modes and a transfer in every cell; every chart has the CSV it was
// drawn from beside it.
func TestBenchWANResults(t *testing.T) {
	paths := keptResults(t, "bench-wan-*.csv")
	modes := []string{ModeDirect, ModeParallel, ModeSosappliance, ModeAuto}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
		if err != nil || len(rows) == 0 {
			t.Errorf("%s: %v (%d rows)", path, err, len(rows))
			continue
		}
		// An A/B file: the sweep's columns follow its own.
		lead := slices.Index(rows[0], "mode")
		if lead < 0 {
			t.Errorf("%s: no mode column in %v", path, rows[0])
			continue
		}
		var sweep bytes.Buffer
		w := csv.NewWriter(&sweep)
		for _, row := range rows {
			_ = w.Write(row[lead:])
		}
		w.Flush()
		points, err := ReadCSV(&sweep)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if len(points) == 0 {
			t.Errorf("%s: no points", path)
		}
		sos := 0
		for i, p := range points {
			if !slices.Contains(modes, p.Mode) {
				t.Errorf("%s row %d: mode %q", path, i+2, p.Mode)
			}
			if p.Result.ReceivedBps <= 0 || p.Result.Seconds <= 0 || p.Result.Bytes <= 0 || p.Streams < 0 {
				t.Errorf("%s row %d: no transfer: %+v", path, i+2, p)
			}
			if p.Mode == ModeSosappliance || p.Mode == ModeAuto {
				sos++
			}
		}
		if sos == 0 {
			t.Errorf("%s: no sosappliance cell", path)
		}
	}
	for _, chart := range keptResults(t, "bench-wan-*.png") {
		if _, err := os.Stat(strings.TrimSuffix(chart, ".png") + ".csv"); err != nil {
			t.Errorf("%s: no CSV beside it: %v", chart, err)
		}
		f, err := os.Open(chart)
		if err != nil {
			t.Fatal(err)
		}
		_, err = png.DecodeConfig(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", chart, err)
		}
	}
}
