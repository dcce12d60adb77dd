// Package archive reads and writes torchd's model archives, which are
// TorchServe's: it knows files, manifests and per-model configs, and nothing
// of tensors, LibTorch or HTTP.
//
// # Forms
//
// Open takes a model in any of these forms and returns a *Model whose Dir
// holds its files:
//
//   - name.mar: a zip with MAR-INF/MANIFEST.json and the artifacts at the
//     root, as torch-model-archiver writes it (deflated, or stored with
//     --archive-format zip-store). MMS manifests are read too.
//   - name.tar.gz or name.tgz: the same files in a gzip-compressed tar.
//     torch-model-archiver puts every entry under name/ and TorchServe strips
//     the first path component; torchd strips the top-level directory when it
//     is the only entry at the root, which is the same for every such archive
//     and also reads tars made without one.
//   - a directory with the same files (--archive-format no-archive). As in
//     TorchServe, a directory whose only entry is a directory is read from
//     that one. It is used in place, never copied or removed.
//   - a bare TorchScript file (.pt, .pth, .ts, .torchscript), with the
//     handler given by the caller (WithHandler).
//
// # What torchd serves
//
// The manifest's serializedFile must be a TorchScript file (saved with
// torch.jit.save), and the handler one of HandlerNames: image_classifier,
// image_captioner, text_classifier or tensor, plus any a handlers package
// adds with RegisterHandlerName. A custom Python handler ("my_handler.py",
// "module:func", a module in the archive), a TorchServe built-in torchd has no
// native version of, or an eager model (a manifest with modelFile) resolves to
// HandlerPython, with PythonHandler naming what TorchServe's worker imports:
// handler processes run it, and the serialized file is the handler's to load.
//
// A .mar must have MAR-INF/MANIFEST.json (ErrMissingManifest otherwise;
// TorchServe would use an empty default and fail later). A directory or
// .tar.gz may leave it out if it has a model-config.toml, which then names
// the handler; the model file is its serialized_file, else the only
// TorchScript file at the root, and the model name is the file or directory
// name.
//
// # model-config.toml
//
// Each built-in handler's options are in docs/guide/handlers.md.
//
// torchd's per-model config sits at the archive root under exactly this
// name. Every key is optional; a key that is not set takes the daemon's
// value (flags > env > torchd.toml > archive > defaults), and unknown keys
// are errors:
//
//	handler = "image_classifier" # a built-in handler; wins over the manifest's
//	serialized_file = "model.pt" # only needed without a manifest
//	batch_size = 8               # >= 1; default 1
//	max_batch_delay = 5          # ms, >= 0; default 100
//	min_workers = 1              # >= 1; default 1
//	max_workers = 2              # >= min_workers; default min_workers
//	job_queue_size = 100         # >= 1; default 100
//	response_timeout = 120       # s, >= 1; default 120
//	startup_timeout = 120        # s, >= 1; default 120
//	device = "cpu"               # "cpu", "cuda" or "cuda:N"; default: the daemon's choice
//	device_ids = [0, 1]          # GPUs for device = "cuda"; default all
//	threads = 1                  # LibTorch intra-op threads per worker; default LibTorch's
//	freeze = true                # torch.jit.freeze the module; default false
//	precision = "bf16"           # "fp32", "bf16", "fp16", "int8" (those two: packages) or "auto"; default fp32, or auto with variants
//	                             # auto: of the .pt2 and its variants (model_int8.pt2, model_bf16.pt2), the fastest the CPU computes natively
//	fp32_modules = ["fc"]        # submodules a TorchScript model keeps in float32 in bf16
//
//	[options]                    # the handler's; it validates them
//	image_size = 224
//	resize = 256
//	mean = [0.485, 0.456, 0.406]
//	std = [0.229, 0.224, 0.225]
//	top_k = 5
//	color = "rgb"
//	label_file = "classes.txt"   # read by archive into Model.Labels; default index_to_name.json
//	vocab = "vocab.txt"          # a file of the archive; handlers find it with Model.Path
//	tokenizer = "tokenizer.json" # a Hugging Face tokenizer.json (text handlers)
//	max_length = 128
//
//	[[inputs]]                   # the declared signature; optional
//	name = "input__0"
//	dtype = "float32"            # one of DTypes
//	shape = [-1, 3, 224, 224]    # -1 marks a variable dimension
//
//	[[outputs]]
//	name = "output__0"
//	dtype = "float32"
//	shape = [-1, 1000]
//
// When an archive has both, model-config.toml is read and the manifest's
// configFile ignored, so one archive can serve TorchServe and torchd.
//
// # model-config.yaml
//
// TorchServe's per-model config, named by the manifest's configFile, is read
// when there is no model-config.toml: minWorkers, maxWorkers, batchSize,
// maxBatchDelay (ms), responseTimeout and startupTimeout (s), deviceType (cpu
// or gpu), deviceIds and jobQueueSize. As in TorchServe, 0 leaves a value
// unset, and every other key, with the entries of a handler: map, goes to the
// handler as Options. Keys of the wrong type are errors here, where
// TorchServe logs a warning.
//
// # index_to_name.json
//
// Read into Model.Labels as TorchServe reads it: {"0": "person"}, or
// {"0": ["n01440764", "tench"]} whose last element is the label.
//
// # Safety
//
// Archives are untrusted. Open extracts into a new directory (os.MkdirTemp,
// mode 0700) through an os.Root, and refuses, with an *EntryError wrapping
// the reason: names with a ".." component (ErrPathTraversal), absolute names
// (ErrAbsolutePath), symlinks whose target is absolute or resolves outside
// the directory, hard links to anything but an earlier file of the archive
// (copied, never linked), and entries below a link (ErrLinkEscape), two
// entries with one name (ErrDuplicateEntry), devices and FIFOs
// (ErrUnsupportedEntry), and more bytes or entries than Limits allow
// (ErrFileTooLarge, ErrArchiveTooLarge, ErrTooManyFiles), counted while
// copying rather than read from headers. A failed Open removes everything it
// extracted; Model.Close removes the rest.
package archive
