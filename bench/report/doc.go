// Package report turns a bench run into what people read: a table on the
// terminal, results.json, report.md and plots (PNG, drawn with
// gonum.org/v1/plot), and shows progress while the run goes on.
//
// Results is the one model all of them are made from; the scenarios fill
// it in. Times in it are milliseconds (float64) unless a field says
// otherwise, so that results.json reads without unit conversions.
package report
