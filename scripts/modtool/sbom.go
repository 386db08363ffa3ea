package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"
)

// SPDX 2.3, the fields an SBOM of a Go binary needs.
type spdxDoc struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string         `json:"name"`
	SPDXID           string         `json:"SPDXID"`
	VersionInfo      string         `json:"versionInfo"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
	Comment          string         `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// writeSBOM writes to out an SPDX 2.3 JSON document of the Go binary at
// bin, named name, from the build information the toolchain recorded in
// it (what go version -m prints): the main module with the binary's
// SHA-256, the Go standard library, and every module linked in, at the
// version built (a replacement's, when replaced) with its go.sum hash.
// created is the document's time (SOURCE_DATE_EPOCH: the same binary gives
// the same document).
func writeSBOM(out, bin, name string, created time.Time) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("%s: %v", bin, err)
	}
	sum := sha256.Sum256(data)
	binSum := hex.EncodeToString(sum[:])
	doc := spdxDoc{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              name,
		DocumentNamespace: "https://" + rootPath + "/spdx/" + name + "-" + binSum,
		CreationInfo: spdxCreation{
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: floodgate-modtool-sbom"},
		},
	}
	main := spdxPackage{
		Name:             bi.Main.Path,
		SPDXID:           "SPDXRef-Package-main",
		VersionInfo:      bi.Main.Version,
		DownloadLocation: "git+https://" + rootPath,
		Checksums:        []spdxChecksum{{"SHA256", binSum}},
		ExternalRefs:     []spdxRef{purl(bi.Main.Path, bi.Main.Version)},
		Comment:          "the binary " + bi.Path + ", built with " + bi.GoVersion + " " + settings(bi),
	}
	std := spdxPackage{
		Name:             "stdlib",
		SPDXID:           "SPDXRef-Package-stdlib",
		VersionInfo:      bi.GoVersion,
		DownloadLocation: "NOASSERTION",
		ExternalRefs:     []spdxRef{purl("stdlib", bi.GoVersion)},
		Comment:          "the Go standard library and runtime linked in",
	}
	doc.Packages = append(doc.Packages, main, std)
	doc.Relationships = append(doc.Relationships,
		spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", main.SPDXID},
		spdxRelationship{main.SPDXID, "DEPENDS_ON", std.SPDXID})
	for i, d := range bi.Deps {
		m, comment := d, ""
		if d.Replace != nil {
			m = d.Replace
			comment = "replaces " + d.Path + " " + d.Version + "; "
		}
		p := spdxPackage{
			Name:             d.Path,
			SPDXID:           fmt.Sprintf("SPDXRef-Package-%d", i+1),
			VersionInfo:      m.Version,
			DownloadLocation: "NOASSERTION",
			ExternalRefs:     []spdxRef{purl(m.Path, m.Version)},
		}
		if h, ok := h1Hex(m.Sum); ok {
			p.Checksums = []spdxChecksum{{"SHA256", h}}
			comment += "the checksum is the module's go.sum hash " + m.Sum + ", in hex"
		}
		p.Comment = strings.TrimSuffix(comment, "; ")
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{main.SPDXID, "DEPENDS_ON", p.SPDXID})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

// purl is the package URL of a Go module at a version.
func purl(path, version string) spdxRef {
	return spdxRef{"PACKAGE-MANAGER", "purl", "pkg:golang/" + path + "@" + version}
}

// h1Hex is the SHA-256 of a go.sum "h1:" hash, in hex.
func h1Hex(sum string) (string, bool) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sum, "h1:"))
	if !strings.HasPrefix(sum, "h1:") || err != nil || len(b) != sha256.Size {
		return "", false
	}
	return hex.EncodeToString(b), true
}

// settings are the build settings that say what was built, one string.
func settings(bi *debug.BuildInfo) string {
	var s []string
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "GOOS", "GOARCH", "CGO_ENABLED", "-trimpath", "vcs.revision", "vcs.time", "vcs.modified":
			s = append(s, kv.Key+"="+kv.Value)
		}
	}
	return "(" + strings.Join(s, " ") + ")"
}
