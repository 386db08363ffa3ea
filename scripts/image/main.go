// Command image builds floodgate's container image without a container
// daemon: a static floodgate binary, the image's configuration file
// (deploy/image/floodgate.yaml) and a minimal /etc/passwd on an empty base,
// written as an OCI image layout directory.
//
//	go run . [-root DIR] [-out DIR] [-tag TAG] [-arch ARCH] [-archive FILE] [-licenses SPDX]
//
// The build is reproducible: the same commit built with the same Go
// toolchain gives the same manifest digest. Every timestamp in the image
// (file times, the created label and field) is SOURCE_DATE_EPOCH if it is
// set, else the time of the commit at HEAD.
//
// It is a module of its own so that go-containerregistry is no requirement
// of floodgate's; make image runs it. See docs/operating.md, "Container
// image".
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
)

func main() {
	var o options
	flag.StringVar(&o.root, "root", "../..", "the repository's root `directory`")
	flag.StringVar(&o.out, "out", "../../build/image", "the OCI image layout `directory` to write (replaced if it holds one)")
	flag.StringVar(&o.tag, "tag", "latest", "the `tag` the layout names the image by (org.opencontainers.image.ref.name)")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "the `architecture` to build for (GOARCH)")
	flag.StringVar(&o.archive, "archive", "", "also write the layout as an OCI archive `file` (podman load -i FILE)")
	flag.StringVar(&o.licenses, "licenses", "", "the SPDX `expression` of the license, for org.opencontainers.image.licenses; required when the repository has a LICENSE file")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "image: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	o.warn = os.Stderr
	img, err := build(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s %s (floodgate %s, linux/%s)\n", img.digest, o.out, refName(o.tag), img.version, o.arch)
}
