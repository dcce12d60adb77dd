// Command torchd is the torchd model server and its tools.
//
//	torchd serve        run the inference, management and metrics servers
//	torchd archive      build and inspect model archives
//	torchd bench-model  a model's preprocess and batched forward in-process: the ceiling
//	torchd version      print the versions of torchd and LibTorch
package main

import (
	"fmt"
	"os"
	"sort"
)

// command is one subcommand; each lives in a file of its own and registers itself in init.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "serve" || os.Args[1] == "bench-model") {
		openMPWait()
	}
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "torchd: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := cmd.run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "torchd %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: torchd <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", n, commands[n].summary)
	}
}
