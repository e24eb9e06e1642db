package remotewrite

import (
	"fmt"

	"github.com/prometheus/prometheus/config"
	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"
)

// OptionsKey is the key of shoal's own block in a remote_write entry:
//
//	remote_write:
//	  - url: https://example/api/v1/write
//	    shoal:
//	      failure_policy: spec
//
// Prometheus parses its configuration refusing unknown fields, so
// ExtractOptions takes the blocks out before the file is handed to it. The
// block sits in the entry it configures, survives reloads like the rest of
// the file, and everything else is still parsed strictly.
const OptionsKey = "shoal"

// ExtractOptions removes the OptionsKey block of every remote_write entry
// from a configuration file's content. It returns the content without them
// (the very same bytes when there is none) and each entry's options, by
// position in remote_write. Content that is not a YAML mapping is returned
// unchanged, for the Prometheus parser to report.
func ExtractOptions(content []byte) ([]byte, []QueueOptions, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(content, &doc); err != nil || len(doc.Content) == 0 {
		return content, nil, nil
	}
	entries := remoteWriteEntries(doc.Content[0])
	if entries == nil {
		return content, nil, nil
	}
	opts := make([]QueueOptions, len(entries.Content))
	found := false
	for i, e := range entries.Content {
		if e.Kind != yaml.MappingNode {
			continue
		}
		for k := 0; k+1 < len(e.Content); k += 2 {
			if e.Content[k].Value != OptionsKey {
				continue
			}
			v := e.Content[k+1]
			if err := decodeOptions(v, &opts[i]); err != nil {
				return nil, nil, fmt.Errorf("remote_write[%d].%s (line %d): %w", i, OptionsKey, v.Line, err)
			}
			e.Content = append(e.Content[:k], e.Content[k+2:]...)
			found = true
			break
		}
	}
	if !found {
		return content, opts, nil
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, nil, fmt.Errorf("re-encoding the configuration without the %s blocks: %w", OptionsKey, err)
	}
	return out, opts, nil
}

// remoteWriteEntries is the remote_write sequence of the top-level mapping,
// or nil.
func remoteWriteEntries(root *yaml.Node) *yaml.Node {
	if root.Kind != yaml.MappingNode {
		return nil
	}
	for k := 0; k+1 < len(root.Content); k += 2 {
		if root.Content[k].Value == "remote_write" && root.Content[k+1].Kind == yaml.SequenceNode {
			return root.Content[k+1]
		}
	}
	return nil
}

// decodeOptions parses one block as strictly as Prometheus parses the rest:
// an unknown key is an error.
func decodeOptions(n *yaml.Node, o *QueueOptions) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	return yamlv2.UnmarshalStrict(b, o)
}

// OptionsByName keys ExtractOptions' options by the queue name of the
// loaded entry at the same position.
func OptionsByName(cfg *config.Config, opts []QueueOptions) map[string]QueueOptions {
	m := map[string]QueueOptions{}
	for i, rw := range cfg.RemoteWriteConfigs {
		if i < len(opts) && rw != nil && opts[i] != (QueueOptions{}) {
			m[QueueName(rw)] = opts[i]
		}
	}
	return m
}
