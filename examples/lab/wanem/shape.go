// Package wanem is the lab's WAN: it joins two network interfaces like a
// wire and gives each direction a one-way delay, a rate limit, a drop-tail
// queue sized in bytes and seeded random loss, because the lab kernel has no
// netem.
//
// Frames are read and written with AF_PACKET sockets. The interfaces it joins
// (and their veth peers) must have tso, gso, gro and tx checksumming turned
// off: segmentation offloads hand the socket frames larger than the MTU,
// which it drops and counts as oversize, and tx checksum offload leaves
// checksums unfinished, which the far end then rejects. Frames that carry
// VLAN tags also need rxvlan and txvlan off, or the kernel moves the tag out
// of the frame before the socket sees it and the tag is lost.
package wanem

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// MinDefaultQueueBytes is the floor of the queue sized from the
// bandwidth-delay product when Shape.QueueBytes is zero, so that links with
// little or no delay still absorb a few milliseconds of bursts.
const MinDefaultQueueBytes = 1 << 20

// Shape is how one direction of the WAN treats the frames that cross it.
type Shape struct {
	// Delay is the one-way propagation delay added after a frame leaves the
	// bottleneck queue.
	Delay time.Duration
	// Rate is the bottleneck rate in bits per second of Ethernet frame
	// bytes; zero means unlimited.
	Rate int64
	// QueueBytes bounds the bottleneck queue in frame bytes; a frame that
	// does not fit is dropped (drop-tail). Zero sizes the queue to one
	// bandwidth-delay product of Rate and a round trip of 2×Delay, at least
	// MinDefaultQueueBytes.
	QueueBytes int
	// Loss is the probability in [0, 1] that a frame is lost on arrival.
	Loss float64
	// Seed seeds the loss generator; the same seed and the same arrivals
	// lose the same frames.
	Seed int64
}

// Config shapes the two directions of the WAN independently: AtoB for frames
// read on interface A and written to B, BtoA for the way back.
type Config struct {
	AtoB Shape
	BtoA Shape
}

// Symmetric returns a Config that shapes both directions alike. Each
// direction still draws its losses from its own generator.
func Symmetric(s Shape) Config {
	return Config{AtoB: s, BtoA: s}
}

// Validate reports every field of the shape that is out of range.
func (s Shape) Validate() error {
	var errs []error
	if s.Delay < 0 {
		errs = append(errs, fmt.Errorf("delay %v is negative", s.Delay))
	}
	if s.Rate < 0 {
		errs = append(errs, fmt.Errorf("rate %d bit/s is negative", s.Rate))
	}
	if s.QueueBytes < 0 {
		errs = append(errs, fmt.Errorf("queue %d bytes is negative", s.QueueBytes))
	}
	if math.IsNaN(s.Loss) || s.Loss < 0 || s.Loss > 1 {
		errs = append(errs, fmt.Errorf("loss %v is outside [0, 1]", s.Loss))
	}
	return errors.Join(errs...)
}

// Validate reports every out-of-range field of both directions.
func (c Config) Validate() error {
	var errs []error
	if err := c.AtoB.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("a->b: %w", err))
	}
	if err := c.BtoA.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("b->a: %w", err))
	}
	return errors.Join(errs...)
}

// EffectiveQueueBytes is the queue limit the shape runs with, resolving a
// zero QueueBytes to the bandwidth-delay product.
func (s Shape) EffectiveQueueBytes() int {
	if s.QueueBytes > 0 {
		return s.QueueBytes
	}
	bdp := float64(s.Rate) / 8 * (2 * s.Delay).Seconds()
	if bdp > math.MaxInt32 {
		return math.MaxInt32
	}
	return max(int(bdp), MinDefaultQueueBytes)
}

// ParseRate reads a rate the way tc writes one, in bits per second with an
// optional decimal unit: "500mbit", "1gbit", "1.5Gbit", "64kbit", "9600bit",
// or a bare number of bits per second. "0" means unlimited.
func ParseRate(s string) (int64, error) {
	units := []struct {
		suffix string
		scale  float64
	}{
		{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
	}
	return parseScaled("rate", s, func(lower string) (string, float64) {
		for _, u := range units {
			if num, ok := strings.CutSuffix(lower, u.suffix); ok {
				return num, u.scale
			}
		}
		return lower, 1
	})
}

// ParseSize reads a byte count: "2MB" and "512KB" are decimal, "2MiB" and
// "512KiB" binary, a bare number is bytes.
func ParseSize(s string) (int, error) {
	units := []struct {
		suffix string
		scale  float64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"b", 1},
	}
	n, err := parseScaled("size", s, func(lower string) (string, float64) {
		for _, u := range units {
			if num, ok := strings.CutSuffix(lower, u.suffix); ok {
				return num, u.scale
			}
		}
		return lower, 1
	})
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("size %q is larger than %d bytes", s, math.MaxInt32)
	}
	return int(n), nil
}

func parseScaled(what, s string, split func(lower string) (string, float64)) (int64, error) {
	num, scale := split(strings.ToLower(strings.TrimSpace(s)))
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s %q is not a number with a unit", what, s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%s %q is negative", what, s)
	}
	total := v * scale
	if total >= math.MaxInt64 {
		return 0, fmt.Errorf("%s %q is too large", what, s)
	}
	return int64(math.Round(total)), nil
}
