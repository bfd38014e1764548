package testsupport

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// DialFrom connects to addr from the local address from (any of 127/8 is
// local on Linux, and so is any address of a test's own namespace).
func DialFrom(from, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	return d.Dial("tcp", addr)
}

// GetOn sends GET path on c, which it keeps open, and returns the body of
// a 200 answer.
func GetOn(c net.Conn, path string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("answered %s", resp.Status)
	}
	return string(body), err
}

// GetFrom makes one request from from on a fresh connection and returns
// the body of a 200 answer.
func GetFrom(from, addr, path string) (string, error) {
	c, err := DialFrom(from, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return GetOn(c, path)
}

// Unanswered sends GET path to addr from from and returns how many bytes
// came back before the server ended the connection, and how it ended
// (nil: the server left it open, unanswered, for 5 s).
func Unanswered(from, addr, path string) (int64, error) {
	c, err := DialFrom(from, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	n, err := io.Copy(io.Discard, c)
	if err == nil {
		return n, io.EOF
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return n, nil
	}
	return n, err
}
