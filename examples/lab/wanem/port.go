package wanem

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"unsafe"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// socketBufferBytes sizes each socket's kernel buffers so that a few
// milliseconds of the emulator being descheduled at 1 Gbit/s and more do not
// turn into kernel drops.
const socketBufferBytes = 8 << 20

// port is one joined interface: a raw AF_PACKET socket that reads every
// frame arriving on it and writes frames out of it.
type port struct {
	name string
	mtu  int
	conn *packet.Conn
	raw  syscall.RawConn

	// rx and tx are reused for every syscall so that the hot path does not
	// allocate a closure per frame.
	rx     recvOp
	tx     sendOp
	rxCall func(fd uintptr) bool
	txCall func(fd uintptr) bool

	kernelDrops uint64
}

func openPort(name string) (*port, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	conn, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
	if err != nil {
		return nil, fmt.Errorf("open packet socket on %s: %w", name, err)
	}
	p := &port{name: name, mtu: ifi.MTU, conn: conn}
	p.rxCall, p.txCall = p.rx.do, p.tx.do
	if err := p.configure(); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("configure packet socket on %s: %w", name, err)
	}
	return p, nil
}

func (p *port) configure() error {
	raw, err := p.conn.SyscallConn()
	if err != nil {
		return err
	}
	p.raw = raw
	var sockErr error
	err = raw.Control(func(fd uintptr) {
		// Without this the socket would read back every frame the emulator
		// writes to the interface and send it round again.
		if err := unix.SetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
			sockErr = fmt.Errorf("PACKET_IGNORE_OUTGOING: %w", err)
			return
		}
		sockErr = errors.Join(
			setBuffer(int(fd), unix.SO_RCVBUFFORCE, unix.SO_RCVBUF),
			setBuffer(int(fd), unix.SO_SNDBUFFORCE, unix.SO_SNDBUF),
		)
	})
	if err := errors.Join(err, sockErr); err != nil {
		return err
	}
	// A wire carries frames for any address; veths deliver them anyway, real
	// NICs only in promiscuous mode.
	if err := p.conn.SetPromiscuous(true); err != nil {
		return err
	}
	return p.discardEarlyFrames()
}

// setBuffer sets a socket buffer size past the sysctl limit when the process
// may (root), and as far as the limit allows otherwise.
func setBuffer(fd, forceOpt, opt int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, forceOpt, socketBufferBytes); err == nil {
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, socketBufferBytes); err != nil {
		return fmt.Errorf("socket buffer: %w", err)
	}
	return nil
}

// discardEarlyFrames empties the socket of whatever it caught between bind
// and PACKET_IGNORE_OUTGOING, which may include frames the host itself sent.
func (p *port) discardEarlyFrames() error {
	buf := make([]byte, 64)
	var err error
	ctrlErr := p.raw.Control(func(fd uintptr) {
		for range 1 << 16 {
			_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd,
				uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
			switch errno {
			case 0, unix.EINTR:
				continue
			case unix.EAGAIN:
				return
			default:
				err = errno
				return
			}
		}
	})
	return errors.Join(ctrlErr, err)
}

// recv reads one frame into buf. It returns the frame's full length, which
// exceeds len(buf) when the frame did not fit.
func (p *port) recv(buf []byte) (int, error) {
	p.rx.buf = buf
	err := p.raw.Read(p.rxCall)
	p.rx.buf = nil
	if err != nil {
		return 0, err
	}
	if p.rx.err != nil {
		return 0, os.NewSyscallError("recvfrom", p.rx.err)
	}
	return p.rx.n, nil
}

// send writes one frame out of the interface.
func (p *port) send(frame []byte) error {
	p.tx.buf = frame
	err := p.raw.Write(p.txCall)
	p.tx.buf = nil
	if err != nil {
		return err
	}
	if p.tx.err != nil {
		return os.NewSyscallError("write", p.tx.err)
	}
	return nil
}

func (p *port) readKernelDrops() (uint64, error) {
	st, err := p.conn.Stats()
	if err != nil {
		return 0, err
	}
	return uint64(st.Drops), nil
}

func (p *port) close() error {
	if err := p.conn.Close(); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}

// recvOp is one recvfrom(2) with MSG_TRUNC, so an oversize frame reports its
// real length instead of arriving silently cut.
type recvOp struct {
	buf []byte
	n   int
	err error
}

func (op *recvOp) do(fd uintptr) bool {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, fd,
			uintptr(unsafe.Pointer(&op.buf[0])), uintptr(len(op.buf)), unix.MSG_TRUNC, 0, 0)
		switch errno {
		case 0:
			op.n, op.err = int(n), nil
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			op.n, op.err = 0, errno
			return true
		}
	}
}

// sendOp is one write(2) of a whole frame on the bound socket.
type sendOp struct {
	buf []byte
	err error
}

func (op *sendOp) do(fd uintptr) bool {
	for {
		_, err := unix.Write(int(fd), op.buf)
		switch err {
		case nil:
			op.err = nil
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			op.err = err
			return true
		}
	}
}
