package client_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/onceledger/onceledger/client"
)

var errNoCredits = errors.New("the account cannot cover the work")

// Authorise a hold before the work, telling an account short of credits from any other failure: the
// example of README.md, compiled here so that it stays true. It has no output to check, so it is not run.
func ExampleNew() {
	reserve := func(ctx context.Context) error {
		c, err := client.New("http://127.0.0.1:8080", "onceledger_dev_key_local_only_not_secret")
		if err != nil {
			return err
		}
		hold, err := c.PostHoldWithResponse(ctx, "acct_1", client.PostHoldJSONRequestBody{ID: "job_43", Amount: 40})
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Code == "insufficient_balance" {
			return errNoCredits // nothing was reserved
		} else if err != nil {
			return err
		}
		fmt.Println(hold.JSON201.Hold.Status) // held
		return nil
	}
	if err := reserve(context.Background()); err != nil {
		fmt.Println(err)
	}
}
