package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/hookgate/hookgate/internal/yamldoc"
	"gopkg.in/yaml.v3"
)

// MaxFileSize caps a configuration file: a real one is a few kilobytes, and
// a bigger one is a mistake (or an attack on the parser).
const MaxFileSize = 16 << 20

func tooLarge(file string) Errors {
	return Errors{{File: file, Msg: fmt.Sprintf("larger than %d MiB; a config file that big is refused", MaxFileSize>>20)}}
}

// parseTree reads data as one YAML document; see yamldoc.Parse.
func parseTree(file string, data []byte) (*yaml.Node, Errors) {
	return yamldoc.Parse(file, data)
}

// yamlTypeNames turns the Go types in yaml.v3's decoding messages into
// words.
var (
	yamlTypeNames = strings.NewReplacer(
		"!!", "",
		"[]config.fileEntry", "a list of entries ({domain: ...})",
		"[]string", "a list of strings",
		"into string", "into a string",
		"into bool", "into true/false",
	)
	yamlStructName = regexp.MustCompile(`config\.file\w+`)
)

// yamlErrors turns yaml.v3's decoding messages into Errors with lines, in
// the config file's terms.
func yamlErrors(file string, data []byte, err error) Errors {
	return yamldoc.Errors(file, data, err, func(msg string) string {
		return yamlStructName.ReplaceAllString(yamlTypeNames.Replace(msg), "a mapping (key: value)")
	})
}
