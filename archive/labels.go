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

// ParseLabels parses a label file. A .json file has index_to_name.json's
// form, {"0": "person"} or {"0": ["n01440764", "tench"]}, where for a list
// the last element is the label, as in TorchServe's map_class_to_label. Any
// other file is text with one label per line, line i naming class i.
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
	labels := make(map[int]string, len(raw))
	for k, v := range raw {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 {
			return nil, configErr(name, k, "keys must be class indexes >= 0")
		}
		if list, ok := v.([]any); ok && len(list) > 0 {
			v = list[len(list)-1]
		}
		s, ok := v.(string)
		if !ok {
			return nil, configErr(name, k, "must be a label string or a list whose last element is the label, got %s", jsonDescribe(v))
		}
		labels[i] = s
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
