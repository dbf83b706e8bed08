package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/client"
)

// Lock runs a function while holding an object's lock; the function's
// context ends if the lock is lost, and a grace (WithStopGrace) before its
// validity ends if that is no longer extended (its stop-by signal).
func ExampleClient_Lock() {
	c := client.New(socketPath)
	defer c.Close()
	err := c.Lock(context.Background(), "article-42", func(ctx context.Context) error {
		// hand the fencing token to the storage with every write
		token := client.LeaseFrom(ctx).Token()
		fmt.Println("writing article-42 with a token:", token > 0)
		return nil
	}, client.WithWait(5*time.Second), client.WithInfo("example"), client.WithStopGrace(time.Second))
	fmt.Println("err:", err)
	// Output:
	// writing article-42 with a token: true
	// err: <nil>
}

// An acquire that is not granted in time is an *InstanceLockError naming
// the holder and the position in line.
func ExampleInstanceLockError() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.Close()
	l, err := c.Acquire(ctx, "report-7", client.WithInfo("nightly"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release(ctx)
	fmt.Println("token > 0:", l.Token() > 0, "valid:", l.ValidFor() > 0)

	_, err = c.Acquire(ctx, "report-7", client.WithWait(0)) // try once
	var ile *client.InstanceLockError
	if errors.As(err, &ile) {
		fmt.Println("not granted; position", ile.Position, "holder info", ile.Holder.Info)
	}
	// Output:
	// token > 0: true valid: true
	// not granted; position 1 holder info nightly
}
