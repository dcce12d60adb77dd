package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/BurntSushi/toml"
	"golang.org/x/term"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/daemon"
)

func init() {
	commands["archive"] = command{
		summary: "build a model archive like torch-model-archiver; `archive inspect FILE` shows one",
		run:     runArchive,
	}
}

// runArchive is torch-model-archiver with torchd's checks: the flags keep
// its names, so existing build scripts only change the command.
func runArchive(args []string) error {
	if len(args) > 0 && args[0] == "inspect" {
		return runInspect(args[1:])
	}
	fs := flag.NewFlagSet("torchd archive", flag.ContinueOnError)
	var o archive.WriteOptions
	var extra, format string
	fs.StringVar(&o.ModelName, "model-name", "", "model name, also the archive's file name (required)")
	fs.StringVar(&o.Version, "version", "", "model version; readers default to 1.0")
	fs.StringVar(&o.SerializedFile, "serialized-file", "", "TorchScript file saved with torch.jit.save, or an AOTInductor package (.pt2) (required)")
	fs.StringVar(&o.Handler, "handler", "", "built-in handler: "+strings.Join(archive.HandlerNames(), ", ")+"; default: the config's")
	fs.StringVar(&extra, "extra-files", "", "comma-separated files to add at the root; a directory adds its contents")
	fs.StringVar(&o.ConfigFile, "config-file", "", "model-config.toml, or TorchServe's model-config.yaml")
	fs.StringVar(&o.ExportPath, "export-path", ".", "directory to write the archive into")
	fs.StringVar(&format, "archive-format", string(archive.FormatDefault), "default (.mar), zip-store (.mar, uncompressed), tgz (.tar.gz) or no-archive (a directory)")
	fs.BoolVar(&o.Force, "force", false, "overwrite an existing archive")
	// torch-model-archiver's short forms.
	fs.StringVar(&o.Version, "v", "", "short for --version")
	fs.StringVar(&o.ConfigFile, "c", "", "short for --config-file")
	fs.BoolVar(&o.Force, "f", false, "short for --force")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: torchd archive --model-name NAME --serialized-file MODEL.pt [--handler H] [flags]\n       torchd archive inspect [--handler H] FILE")
		printFlags(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q (to look inside an archive: torchd archive inspect FILE)", fs.Arg(0))
	case o.ModelName == "":
		return errors.New("--model-name is required")
	case o.SerializedFile == "":
		return errors.New("--serialized-file is required: torchd serves TorchScript files and AOTInductor packages (.pt2)")
	}
	for _, f := range strings.Split(extra, ",") {
		if f = strings.TrimSpace(f); f != "" {
			o.ExtraFiles = append(o.ExtraFiles, f)
		}
	}
	o.Format = archive.Format(format)
	bar := newProgressBar(os.Stderr)
	o.Progress = bar.update
	out, err := archive.Write(o)
	bar.finish()
	if err != nil {
		return err
	}
	fmt.Println(out)
	return nil
}

func runInspect(args []string) error {
	fs := flag.NewFlagSet("torchd archive inspect", flag.ContinueOnError)
	handler := fs.String("handler", "", "handler for a bare TorchScript file")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: torchd archive inspect [--handler H] FILE\n\nFILE is a .mar, .tar.gz, .tgz, a directory, a TorchScript file or a .pt2 package.")
		printFlags(fs)
	}
	files, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(files) != 1 {
		fs.Usage()
		return errors.New("inspect takes one archive")
	}
	m, err := archive.Open(files[0], archive.WithHandler(*handler))
	if err != nil {
		if *handler == "" && errors.Is(err, archive.ErrUnsupportedHandler) && strings.Contains(err.Error(), "no handler given") {
			return fmt.Errorf("%w (a bare TorchScript file needs --handler)", err)
		}
		return err
	}
	defer m.Close()
	return printModel(os.Stdout, m)
}

// parseInterspersed parses flags wherever they are, so that both
// `inspect FILE --handler x` and `inspect --handler x FILE` work.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// printFlags lists flags in the --long form torch-model-archiver users know.
func printFlags(fs *flag.FlagSet) {
	w := tabwriter.NewWriter(fs.Output(), 0, 0, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) == 1 {
			return
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "  --%s\t%s%s\n", f.Name, f.Usage, def)
	})
	w.Flush()
}

// printModel writes what `torchd archive inspect` shows: the manifest, the
// config after defaults, the signature, the labels and the files.
func printModel(w io.Writer, m *archive.Model) error {
	fmt.Fprintf(w, "model:      %s, version %s\n", m.Name, m.Version)
	fmt.Fprintf(w, "source:     %s (%s)\n", m.Source, m.Kind)
	fmt.Fprintf(w, "serialized: %s\n", m.SerializedFile)

	fmt.Fprintf(w, "\n# %s\n", archive.ManifestPath)
	if p, err := m.Path(archive.ManifestPath); err == nil {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", strings.TrimRight(string(data), "\n"))
	} else {
		fmt.Fprintln(w, "(none)")
	}

	from := m.Config.File
	if from == "" {
		from = "no config file"
	}
	fmt.Fprintf(w, "\n# config from %s, after defaults (\"# default\" marks what the archive leaves unset)\n", from)
	if err := printConfig(w, m.Config); err != nil {
		return err
	}

	fmt.Fprintln(w, "\n# signature")
	if m.Config.Inputs == nil && m.Config.Outputs == nil {
		fmt.Fprintln(w, "(not declared)")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, side := range []struct {
		name  string
		specs []archive.TensorSpec
	}{{"input", m.Config.Inputs}, {"output", m.Config.Outputs}} {
		for _, s := range side.specs {
			shape := "any rank"
			if s.Shape != nil {
				shape = strings.ReplaceAll(fmt.Sprint(s.Shape), " ", ", ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", side.name, s.Name, s.DType, shape)
		}
	}
	tw.Flush()

	if p := m.Package; p != nil {
		fmt.Fprintf(w, "\n# AOTInductor package: %s, %s, precision %s\n", p.Device, p.March, p.Precision)
		fmt.Fprintf(w, "batch range: [%d, %d]\n", p.BatchMin, p.BatchMax)
		for _, d := range p.Dynamic {
			fmt.Fprintf(w, "dynamic:     %s dimension %d in [%d, %d]\n", d.Input, d.Dim, d.Min, d.Max)
		}
		for _, v := range m.Variants {
			fmt.Fprintf(w, "variant:     %s, precision %s (served by precision = %q, or auto where the CPU computes it)\n", v.File, v.Precision, v.Precision)
		}
	}

	if m.Labels != nil {
		fmt.Fprintf(w, "\n# labels: %d classes\n", len(m.Labels))
	}

	var total int64
	for _, f := range m.Files {
		total += f.Size
	}
	fmt.Fprintf(w, "\n# files: %d, %s\n", len(m.Files), humanBytes(total))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, f := range m.Files {
		human := ""
		if f.Size >= 1024 {
			human = humanBytes(f.Size)
		}
		fmt.Fprintf(tw, "%d\t%s\t  %s\n", f.Size, human, f.Name)
	}
	return tw.Flush()
}

// tomlInts prints as a TOML array of integers.
type tomlInts []int

func (l tomlInts) String() string { return strings.ReplaceAll(fmt.Sprint([]int(l)), " ", ", ") }

// printConfig writes the config after defaults as model-config.toml, so it
// can be copied into one.
func printConfig(w io.Writer, set archive.ModelConfig) error {
	c := core.Resolve(daemon.ModelDefaults(), set.Settings)
	line := func(key string, value any, isSet bool, unit string) {
		s := fmt.Sprintf("%s = %v", key, value)
		if str, ok := value.(string); ok {
			s = fmt.Sprintf("%s = %q", key, str)
		}
		var notes []string
		if unit != "" {
			notes = append(notes, unit)
		}
		if !isSet {
			notes = append(notes, "default")
		}
		if len(notes) > 0 {
			s += " # " + strings.Join(notes, ", ")
		}
		fmt.Fprintln(w, s)
	}
	// tunable is a value, or "auto" (a string, so quoted as TOML wants it).
	tunable := func(auto bool, v any) any {
		if auto {
			return "auto"
		}
		return v
	}
	line("handler", set.Handler, true, "")
	line("batch_size", tunable(c.Auto.BatchSize, c.BatchSize), set.BatchSize.Given(), "")
	delayUnit := "ms"
	if c.Auto.MaxBatchDelay {
		delayUnit = ""
	}
	line("max_batch_delay", tunable(c.Auto.MaxBatchDelay, c.MaxBatchDelay.Milliseconds()), set.MaxBatchDelay.Given(), delayUnit)
	line("min_workers", tunable(c.Auto.MinWorkers, c.MinWorkers), set.MinWorkers.Given(), "")
	line("max_workers", c.MaxWorkers, set.MaxWorkers.Set, "")
	line("job_queue_size", c.JobQueueSize, set.JobQueueSize.Set, "")
	line("response_timeout", int64(c.ResponseTimeout/time.Second), set.ResponseTimeout.Set, "s")
	line("startup_timeout", int64(c.StartupTimeout/time.Second), set.StartupTimeout.Set, "s")
	if set.LatencyTarget.Set {
		line("latency_target_ms", c.LatencyTarget.Milliseconds(), true, "")
	}
	if set.Device.Set {
		line("device", c.Device, true, "")
	} else {
		fmt.Fprintln(w, "# device: the daemon's choice")
	}
	if set.DeviceIDs != nil {
		line("device_ids", tomlInts(set.DeviceIDs), true, "")
	}
	if set.Threads.Set {
		line("threads", c.Threads, true, "")
	} else {
		fmt.Fprintln(w, "# threads: LibTorch's default")
	}
	if set.ForwardBatch.Given() {
		line("forward_batch", tunable(c.Auto.ForwardBatch, c.ForwardBatch), true, "")
	} else {
		fmt.Fprintln(w, "# forward_batch: the whole batch")
	}
	if set.PreferredBatchSize != nil {
		line("preferred_batch_size", tomlInts(set.PreferredBatchSize), true, "")
	}
	line("freeze", c.Freeze, set.Freeze.Set, "")
	line("optimize_for_inference", c.Optimize, set.Optimize.Set, "")
	if set.Precision.Set {
		line("precision", c.Precision, true, "")
	} else {
		fmt.Fprintln(w, "# precision: the daemon's (auto for an archive with package variants, else the package's, else fp32)")
	}
	if len(set.Options) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	enc := toml.NewEncoder(w)
	enc.Indent = ""
	return enc.Encode(struct {
		Options map[string]any `toml:"options"`
	}{set.Options})
}

// humanBytes formats a size the way people read it: 312 B, 44.7 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n)/unit, 0
	for v >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// minProgressBytes is the archive size from which a progress bar is worth drawing.
const minProgressBytes = 64 << 20

// progressBar draws "[=====>    ]  45%  1.2 GiB / 2.6 GiB" on a terminal,
// at most every 100 ms, and nothing when stderr is a pipe or a file, so
// logs and CI output stay clean.
type progressBar struct {
	f     *os.File
	tty   bool
	last  time.Time
	drawn bool
}

func newProgressBar(f *os.File) *progressBar {
	return &progressBar{f: f, tty: term.IsTerminal(int(f.Fd()))}
}

func (b *progressBar) update(done, total int64) {
	if !b.tty || total < minProgressBytes {
		return
	}
	now := time.Now()
	if done < total && now.Sub(b.last) < 100*time.Millisecond {
		return
	}
	b.last = now
	width := 40
	if cols, _, err := term.GetSize(int(b.f.Fd())); err == nil && cols < 80 {
		width = max(10, cols-40)
	}
	filled := int(int64(width) * done / total)
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	fmt.Fprintf(b.f, "\r[%s] %3d%%  %s / %s ", bar, done*100/total, humanBytes(done), humanBytes(total))
	b.drawn = true
}

func (b *progressBar) finish() {
	if b.drawn {
		fmt.Fprintln(b.f)
	}
}
