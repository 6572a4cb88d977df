package redisx_test

import (
	"testing"

	"github.com/hotkv/stampede/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }
