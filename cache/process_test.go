package cache_test

var workers = map[string]func() int{}
