package props

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: a parse
// error in magiconair/properties can leave its lexer goroutine blocked, which
// ParseProperties must avoid.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
