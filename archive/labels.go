package archive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// LabelsFile is TorchServe's class-index-to-label map at the archive root.
const LabelsFile = "index_to_name.json"

// ParseLabels parses a label file. A .json file is read as TorchServe's handlers read
// index_to_name.json (ts/utils/util.py's load_label_mapping), and refused only where they
// refuse it: it must be an object; {"0": "person"}, or {"0": ["n01440764", "tench"]} whose
// list's last element is the label, or {"object_type_names": [...]} listing labels by index.
// Keys that are no class index are kept by TorchServe but never looked up, so they are
// skipped: the token classification example's {"label_list": [...]} passes, for its handler
// to read. Any other file is text with one label per line, line i naming class i.
func ParseLabels(name string, data []byte) (map[int]string, error) {
	if !strings.EqualFold(path.Ext(name), ".json") {
		text := strings.TrimRight(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
		labels := map[int]string{}
		for i, line := range strings.Split(text, "\n") {
			labels[i] = strings.TrimSpace(line)
		}
		return labels, nil
	}
	var raw map[string]any
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, configErr(name, "", "must be a JSON object mapping class indexes to labels: %v", err)
	}
	if names, ok := raw["object_type_names"].([]any); ok {
		raw = make(map[string]any, len(names))
		for i, v := range names {
			raw[strconv.Itoa(i)] = v
		}
	}
	labels := make(map[int]string, len(raw))
	for k, v := range raw {
		if list, ok := v.([]any); ok && len(list) > 0 {
			v = list[len(list)-1]
		}
		s, ok := v.(string)
		if !ok {
			return nil, configErr(name, k, "must be a label string or a list whose last element is the label, got %s", jsonDescribe(v))
		}
		if i, err := strconv.Atoi(k); err == nil && i >= 0 {
			labels[i] = s
		}
	}
	return labels, nil
}

func jsonDescribe(v any) string {
	switch v.(type) {
	case float64:
		return fmt.Sprintf("number %v", v)
	case []any:
		return "an empty list"
	case map[string]any:
		return "an object"
	}
	return describe(v)
}
