package ginlimit_test

import (
	"testing"

	"github.com/gin-gonic/gin"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}
