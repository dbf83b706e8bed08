package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/lock"
)

// Engine.Ask and Engine.Withdraw: a standing ask reaches the holder like a
// signal and stays in its Asks until its own sender withdraws it; the
// holder's engine then delivers KindWithdrawn with its id. Withdrawing one
// ask leaves another; a check that refuses writes nothing; the grant's
// Preemptible and Cleanup are what the asker sees; the grant still
// releases cleanly afterwards.
func TestAskWithdraw(t *testing.T) {
	root := testRoot(t, zkServer)
	e1 := newEngine(t, zkServer.Servers(), root)
	e2 := newEngine(t, zkServer.Servers(), root)
	conn := rawConn(t, zkServer.Servers())
	got := make(chan lock.Signal, 8)
	g := acquire(t, e1, "AW", lock.Background, lock.AcquireOptions{Preemptible: true, Cleanup: 1500 * time.Millisecond,
		OnSignal: func(s lock.Signal) { got <- s }})
	time.Sleep(50 * time.Millisecond) // the holder watch is armed
	next := func(what string) lock.Signal {
		t.Helper()
		select {
		case s := <-got:
			return s
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: nothing delivered within 5s", what)
		}
		return lock.Signal{}
	}
	ctx := context.Background()

	refused := errors.New("refused by check")
	if _, _, err := e2.Ask(ctx, "AW", lock.Signal{Kind: "preempt"}, func(h *lock.Node) error {
		if !h.Preemptible || h.Cleanup != 1500*time.Millisecond || h.Token != g.Token() {
			t.Errorf("check saw %+v, want preemptible, cleanup 1.5s, token %d", h, g.Token())
		}
		return refused
	}); !errors.Is(err, refused) {
		t.Errorf("Ask with a refusing check = %v, want its error", err)
	}

	_, a1, err := e2.Ask(ctx, "AW", lock.Signal{Kind: "preempt", Reason: "one"}, nil)
	if err != nil || a1.ID == "" {
		t.Fatalf("Ask = %+v, %v", a1, err)
	}
	if s := next("first ask"); s.ID != a1.ID || s.Reason != "one" {
		t.Errorf("delivered %+v, want the first ask (the refused one wrote nothing)", s)
	}
	_, a2, err := e2.Ask(ctx, "AW", lock.Signal{Kind: "preempt-forceful", Reason: "two"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := next("second ask"); s.ID != a2.ID {
		t.Errorf("delivered %+v, want the second ask", s)
	}
	if err := e2.Withdraw(ctx, "AW", g.Token(), a2.ID); err != nil {
		t.Fatal(err)
	}
	if s := next("withdrawal"); s.Kind != lock.KindWithdrawn || s.ID != a2.ID {
		t.Errorf("delivered %+v, want %s of the second ask", s, lock.KindWithdrawn)
	}
	if asks := g.Asks(); len(asks) != 1 || asks[0].ID != a1.ID || !g.Standing(a1) || g.Standing(a2) {
		t.Errorf("asks after withdrawing the second = %+v, want the first alone", asks)
	}
	st, err := e2.Inspect(ctx, "AW")
	if err != nil || st.Holder == nil || len(st.Holder.Asks) != 1 || st.Holder.Asks[0].ID != a1.ID {
		t.Errorf("Inspect: %+v %v, want the first ask standing", st.Holder, err)
	}
	// Withdrawing again, or with another token, changes nothing.
	if err := e2.Withdraw(ctx, "AW", g.Token(), a2.ID); err != nil {
		t.Errorf("second Withdraw = %v", err)
	}
	if err := e2.Withdraw(ctx, "AW", g.Token()+1, a1.ID); err != nil {
		t.Errorf("Withdraw with another token = %v, want nil (that grant is gone)", err)
	}
	if asks := g.Asks(); len(asks) != 1 {
		t.Errorf("asks = %+v, want the first still", asks)
	}
	if err := e2.Withdraw(ctx, "AW", g.Token(), a1.ID); err != nil {
		t.Fatal(err)
	}
	if s := next("second withdrawal"); s.Kind != lock.KindWithdrawn || s.ID != a1.ID || len(g.Asks()) != 0 {
		t.Errorf("delivered %+v, asks %+v; want the first withdrawn and none left", s, g.Asks())
	}
	release(t, g)
	waitFor(t, 5*time.Second, "nodes deleted", func() bool { return len(children(t, conn, root, "AW")) == 0 })
	if _, _, err := e2.Ask(ctx, "AW", lock.Signal{Kind: "preempt"}, nil); !errors.Is(err, lock.ErrNoNode) {
		t.Errorf("Ask without a holder = %v, want ErrNoNode", err)
	}
	if err := e2.Withdraw(ctx, "AW", g.Token(), a1.ID); err != nil {
		t.Errorf("Withdraw without a holder = %v, want nil", err)
	}
}
