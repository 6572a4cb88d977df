package redisx

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts are the fallbacks for servers without the native conditional
// commands, and the only way to extend or read the expiry of a large value
// without sending it back. Each compares the stored value with ARGV[1], or,
// when ARGV[2] is "sha1", its SHA-1 with ARGV[1].
var (
	//go:embed delifeq.lua
	delIfEqSrc string
	//go:embed pexpireifeq.lua
	pexpireIfEqSrc string
	//go:embed pttlifeq.lua
	pttlIfEqSrc string
	//go:embed setifeq.lua
	setIfEqSrc string
	//go:embed setifeqpub.lua
	setIfEqPubSrc string
)

// scripts are wrapped once per Conn; redis.Script is safe for concurrent use.
type scripts struct {
	delIfEq, pexpireIfEq, pttlIfEq, setIfEq *redis.Script
	setIfEqPub                              *redis.Script // setIfEq, then a publish if it wrote (SetIfEqualPublish)
}

func newScripts() scripts {
	return scripts{
		delIfEq:     redis.NewScript(delIfEqSrc),
		pexpireIfEq: redis.NewScript(pexpireIfEqSrc),
		pttlIfEq:    redis.NewScript(pttlIfEqSrc),
		setIfEq:     redis.NewScript(setIfEqSrc),
		setIfEqPub:  redis.NewScript(setIfEqPubSrc),
	}
}
