# bulkem: one command to see it work, one to test everything.
#   make demo   install what is missing, build and install the package into
#               ./.lib, and run the demo (summary, timing, backend, PNG plot)
#   make test   install what is missing, run cargo test, the HMM and MCMC
#               diagnostics kernels on the CPU emulator, R CMD build and R CMD check --as-cran of the
#               source package built offline from the vendored crates
#               (testthat + vignettes), then the package on a single-node
#               Slurm started here as root (tests/slurm/run.sh); fails on any
#               ERROR or WARNING or a failed Slurm check

APT_PACKAGES = r-base-dev pandoc r-cran-cli r-cran-testthat r-cran-knitr \
  r-cran-rmarkdown r-cran-roxygen2 r-cran-mixtools r-cran-statmod r-cran-progressr \
  r-cran-coda r-cran-posterior r-cran-bayesm r-cran-future r-cran-future.apply \
  r-cran-parallelly r-cran-callr r-cran-mass r-cran-loo r-cran-batchtools \
  r-cran-future.batchtools r-cran-mclust r-cran-survival r-cran-lme4 r-cran-ordinal r-cran-rstantools slurmctld slurmd munge xz-utils qpdf devscripts
RUST_DIR = src/rust
# NVRTC from PyPI, so every CUDA kernel is compile-checked without a GPU.
NVRTC_DIR = $(CURDIR)/.nvrtc
NVRTC_LIB = $(NVRTC_DIR)/nvidia/cu13/lib
LIB = $(CURDIR)/.lib
CHECK_DIR = $(CURDIR)/.check
export BULKEM_CARGO_TARGET_DIR = $(CURDIR)/$(RUST_DIR)/target
# Development builds use the crate registry and one shared target directory;
# `make check` unsets both and builds the source package offline from the
# vendored crates, as CRAN would.
export BULKEM_REGISTRY = true
export PATH := $(PATH):$(HOME)/.cargo/bin
export R_LIBS_USER = $(LIB)
SUDO = $(shell [ "$$(id -u)" = 0 ] || echo sudo)
VERSION = $(shell sed -n 's/^Version: //p' DESCRIPTION)

.PHONY: demo test deps nvrtc install cargo-test kernel-emu configure-check check slurm-test document wrappers bench clean vendor

# The demo installs the built source package, so that vignette("bulkem")
# works afterwards.
demo: deps
	mkdir -p $(LIB) demo-output
	R CMD build --no-manual . && R CMD INSTALL --no-test-load --library=$(LIB) bulkem_$(VERSION).tar.gz && \
	  rm -f bulkem_$(VERSION).tar.gz
	Rscript -e 'library(bulkem, lib.loc = "$(LIB)")' >/dev/null
	cd demo-output && Rscript -e 'demo("bulkem", package = "bulkem", ask = FALSE, echo = FALSE)'

test: deps cargo-test kernel-emu configure-check check slurm-test

deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs"; exit 1; }

install: deps
	mkdir -p $(LIB)
	R CMD INSTALL --no-test-load --library=$(LIB) . && \
	  Rscript -e 'library(bulkem, lib.loc = "$(LIB)")' >/dev/null

nvrtc:
	@[ -f $(NVRTC_LIB)/libnvrtc.so.13 ] || python3 -m pip install -q --disable-pip-version-check \
	  --target $(NVRTC_DIR) nvidia-cuda-nvrtc==13.0.88

cargo-test: deps nvrtc
	cd $(RUST_DIR) && LD_LIBRARY_PATH=$(NVRTC_LIB):$$LD_LIBRARY_PATH BULKEM_REQUIRE_NVRTC=1 \
	  cargo test --workspace

# The CUDA kernels of kernels/hmm.cu and kernels/diagnostics.cu run on the
# CPU (tools/cuda-emu) against a plain C++ reference and the host's
# diagnostics: their results are checked here, not only that they compile.
kernel-emu: deps
	sh tools/cuda-emu/run.sh

# R CMD check --as-cran of the built source package, as CRAN would run it:
# no network for cargo (offline, an empty CARGO_HOME, the vendored crates),
# at most 2 cores (--as-cran sets _R_CHECK_LIMIT_CORES_). No PDF manual
# (needs LaTeX) and no remote incoming checks (need the network).
check: deps
	sh tools/vendor-check.sh
	rm -rf $(CHECK_DIR) && mkdir -p $(CHECK_DIR)/cargo-home
	env -u BULKEM_CARGO_TARGET_DIR -u BULKEM_REGISTRY CARGO_HOME=$(CHECK_DIR)/cargo-home CARGO_NET_OFFLINE=true \
	  R CMD build --no-manual . && mv bulkem_$(VERSION).tar.gz $(CHECK_DIR)/
	cd $(CHECK_DIR) && env -u BULKEM_CARGO_TARGET_DIR -u BULKEM_REGISTRY CARGO_HOME=$(CHECK_DIR)/cargo-home \
	  CARGO_NET_OFFLINE=true NOT_CRAN=true _R_CHECK_CRAN_INCOMING_REMOTE_=false \
	  _R_CHECK_FUTURE_FILE_TIMESTAMPS_=false _R_CHECK_SYSTEM_CLOCK_=false _R_CHECK_TESTS_NLINES_=0 \
	  R CMD check --as-cran --no-manual bulkem_$(VERSION).tar.gz
	@status=$$(sed -n 's/^Status: //p' $(CHECK_DIR)/bulkem.Rcheck/00check.log); \
	echo "R CMD check --as-cran status: $$status"; \
	grep -E '^\* .*(NOTE|WARNING|ERROR)$$' $(CHECK_DIR)/bulkem.Rcheck/00check.log || true; \
	counts=$$(grep -Eo 'FAIL [0-9]+ \| WARN [0-9]+ \| SKIP [0-9]+ \| PASS [0-9]+' \
	  $(CHECK_DIR)/bulkem.Rcheck/tests/testthat.Rout | tail -n 1); \
	echo "$$counts" | awk '{ print "testthat: " $$11 " passed, " $$2 " failed, " $$8 " skipped" }'; \
	case "$$status" in *ERROR*|*WARNING*) exit 1;; esac

# bulkem on a real single-node Slurm (tests/slurm/run.sh: daemons started
# and stopped here, checks on the package R CMD check installed).
slurm-test: deps
	R_LIBS=$(CHECK_DIR)/bulkem.Rcheck bash tests/slurm/run.sh

# configure's messages when cargo is missing or rustc too old.
configure-check:
	sh tools/configure-check.sh

# src/rust/vendor.tar.xz from Cargo.lock (needs the network; commit the result).
vendor:
	sh tools/vendor.sh

# Regenerate R/extendr-wrappers.R from the installed package (never edit it).
wrappers: install
	Rscript tools/wrappers.R

# Regenerate NAMESPACE and man/ with roxygen2 from the installed package.
document: wrappers
	Rscript -e 'roxygen2::roxygenise(load_code = roxygen2::load_installed)'

bench: install
	cd $(RUST_DIR) && cargo build --release --bin bulkem-bench
	Rscript inst/bench/cpu_em.R

clean:
	rm -rf $(LIB) $(CHECK_DIR) $(NVRTC_DIR) demo-output $(RUST_DIR)/target src/*.o src/*.so
