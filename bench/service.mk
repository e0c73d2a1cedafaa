# bench/service.mk: `make bench-service`, fosd's speed as a service on this host (issue 7).
# Runs the bare-nng baselines (bench_nng) and then fosd driven through libfos with the in-process
# baselines (bench_service: it starts BUILD/fosd itself, cuda where a GPU is usable, else cpu), and
# prints one table of ratios; then, on a GPU, where a small forward's time goes in-process and how
# several backend instances (fosd's lanes) scale (bench_small_fwd; it says so and does nothing
# without CUDA). Logs and key/value results go to $(BENCH_SERVICE_DIR).
# Copy the table into bench/BENCHMARKS.md with the machine, command and date.
#   make bench-service [BUILD=dir] [BENCH_SERVICE_ARGS="--quick"] [BENCH_SERVICE_DIR=dir]
BENCH_SERVICE_DIR  ?= $(BUILD)/bench-service
BENCH_SERVICE_ARGS ?=

.PHONY: bench-service
bench-service: all $(BUILD)/bench/bench_nng $(BUILD)/bench/bench_service $(BUILD)/bench/bench_small_fwd
	@mkdir -p $(BENCH_SERVICE_DIR)
	@echo "# fosd service benchmark, $$(date -u '+%Y-%m-%d %H:%M UTC'), $$(uname -m), $$(nproc) cores, $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" | tee $(BENCH_SERVICE_DIR)/report.txt
	@command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/# gpu: /' | tee -a $(BENCH_SERVICE_DIR)/report.txt || true
	$(BUILD)/bench/bench_nng --out $(BENCH_SERVICE_DIR)/nng.txt $(filter --quick,$(BENCH_SERVICE_ARGS)) | tee -a $(BENCH_SERVICE_DIR)/report.txt
	$(BUILD)/bench/bench_service --baseline $(BENCH_SERVICE_DIR)/nng.txt --out $(BENCH_SERVICE_DIR)/service.txt $(BENCH_SERVICE_ARGS) | tee -a $(BENCH_SERVICE_DIR)/report.txt
	$(BUILD)/bench/bench_small_fwd --out $(BENCH_SERVICE_DIR)/small_fwd.txt | tee -a $(BENCH_SERVICE_DIR)/report.txt
