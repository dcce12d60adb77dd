package core

import "testing"

// A forward alone takes every core; one that starts while others run takes the cores they
// leave, or an even share, whichever is more; counts set by hand are taken as they are and
// count against the others; the tuner's cap bounds the share.
func TestCoreShare(t *testing.T) {
	c := newCoreShare(8)
	a := c.take(0, 0)
	b := c.take(0, 0)
	d := c.take(0, 0)
	if a != 8 || b != 4 || d != 2 {
		t.Fatalf("three forwards starting one after another took %d, %d, %d threads; want 8, 4, 2", a, b, d)
	}
	c.put(a)
	// B and D hold 6 of 8: the next takes the 2 left (and 8/3 rounds down to 2 as well).
	if e := c.take(0, 0); e != 2 {
		t.Fatalf("with 6 of 8 threads held by two forwards, the next took %d; want 2", e)
	} else {
		c.put(e)
	}
	c.put(b)
	// D holds 2: the next takes the 6 free.
	if e := c.take(0, 0); e != 6 {
		t.Fatalf("with 2 of 8 threads held, the next took %d; want 6", e)
	} else {
		c.put(e)
	}
	c.put(d)
	if c.running != 0 || c.held != 0 {
		t.Fatalf("all forwards returned, yet %d running holding %d", c.running, c.held)
	}

	if f := c.take(3, 0); f != 3 {
		t.Fatalf("a forward with 3 threads set by hand took %d", f)
	}
	if g := c.take(0, 0); g != 5 {
		t.Fatalf("next to a forward holding 3 set by hand, one took %d; want the 5 left", g)
	}
	c.put(3)
	c.put(5)
	if h := c.take(0, 1); h != 1 {
		t.Fatalf("a share capped at 1 took %d", h)
	}
	c.put(1)

	one := newCoreShare(1)
	x, y := one.take(0, 0), one.take(0, 0)
	if x != 1 || y != 1 {
		t.Fatalf("on one core two forwards took %d and %d; want at least 1 each", x, y)
	}
}
