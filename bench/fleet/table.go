package main

import (
	"fmt"
	"io"
	"time"
)

// printMeasured writes the measured points as one Markdown table.
func printMeasured(w io.Writer, pts []point) {
	fmt.Fprintln(w, "Measured (2 shared cores: CPU and wake-up times are upper bounds; messages and bytes are counts)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | design | phase | N | writes | waiters/write | msgs/write | invalidations/write | server B/write | command replies B/write | delivered B/write | msgs/s per process (mean / max) | server CPU µs/write | server KiB/process | wake p50 / p99 / max ms (samples; not waited) | bus msgs/write | near: holders per key; tracking items, B each | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for i := range pts {
		p := &pts[i]
		if p.Phase == "quiet" {
			continue // printQuiet
		}
		secs := p.Elapsed.Seconds()
		mean := float64(p.msgs()) / float64(p.N) / secs
		wake := "–"
		if len(p.Wake) > 0 || p.NotWaited > 0 {
			wake = fmt.Sprintf("%.2f / %.2f / %.1f (%d; %d)", msf(percentile(p.Wake, 50)), msf(percentile(p.Wake, 99)),
				msf(percentile(p.Wake, 100)), len(p.Wake), p.NotWaited)
		}
		near := "–"
		if p.Holders > 0 {
			near = fmt.Sprintf("%d; %d", p.Holders, p.TrackItems)
			if p.TrackMem != 0 {
				near += fmt.Sprintf(", %.0f", p.TrackMem)
			}
			if p.TrackPrefix > 0 {
				near += fmt.Sprintf(" (%d BCAST prefixes)", p.TrackPrefix)
			}
		}
		errs := fmt.Sprint(p.Errors)
		if p.FirstErr != "" {
			errs += " (" + p.FirstErr + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %d | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f / %.0f | %.1f | %.1f | %s | %.2f | %s | %s |\n",
			p.Server, p.Design, p.Phase, p.N, p.Writes, p.Waiters,
			p.perWrite(float64(p.msgs())), p.perWrite(float64(p.Delta.Invals)),
			p.perWrite(float64(p.ServerBytes)), p.perWrite(float64(p.writerReplies())), p.perWrite(float64(p.delivered())),
			mean, float64(p.MaxProcMsgs)/secs, p.perWrite(p.CPU*1e6), p.MemPerProc/1024, wake,
			p.perWrite(float64(p.BusPublish)), near, errs)
	}
}

// printBaseline compares, per design, the server's bytes per write with
// 16 idle processes (the writer and 15 that neither hold nor wait) to
// those with the writer alone: the 13.9x, target <= 1.5x.
func printBaseline(w io.Writer, pts []point) {
	fmt.Fprintln(w, "Idle fleet: server bytes per write with 16 processes (15 neither holding nor waiting) against 1 (issue 13: 13.9x today, target <= 1.5x)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | design | B/write, 1 process | B/write, 16 processes | ratio | msgs/write, 16 processes |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, one := range pts {
		if one.Phase != "idle" || one.N != 1 {
			continue
		}
		for _, many := range pts {
			if many.Phase != "idle" || many.N != 16 || many.Design != one.Design || many.Server != one.Server {
				continue
			}
			b1, b16 := one.perWrite(float64(one.ServerBytes)), many.perWrite(float64(many.ServerBytes))
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.2fx | %.2f |\n", one.Server, one.Design, b1, b16, b16/b1, many.perWrite(float64(many.msgs())))
		}
	}
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printQuiet writes what each fleet cost the server without any write,
// per process and second.
func printQuiet(w io.Writer, pts []point) {
	fmt.Fprintln(w, "Quiet fleet: no writes, per second (pings, the near cache's watch of a Cluster's nodes); the model takes each process's share as the slope in N")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | design | N | seconds | server B/s per process | of which command replies | msgs/s per process | server CPU µs/s, all |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, p := range pts {
		if p.Phase != "quiet" {
			continue
		}
		per := func(v float64) float64 { return v / p.Elapsed.Seconds() / float64(p.N) }
		fmt.Fprintf(w, "| %s | %s | %d | %.1f | %.0f | %.0f | %.2f | %.1f |\n", p.Server, p.Design, p.N, p.Elapsed.Seconds(),
			per(float64(p.ServerBytes)), per(float64(p.Delta.CmdBytes)), per(float64(p.msgs()+p.Delta.Invals)), p.CPU*1e6/p.Elapsed.Seconds())
	}
}
