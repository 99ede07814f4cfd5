#include "comm/transport/mpi_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "comm/transport/mpi_env.h"
#include "comm/transport/mpi_host_hierarchy.h"
#include "core/error.h"

namespace tandem {

using comm_detail::check_mpi;

namespace {

// This process's communicators, for progress_other_communicators. Communicators call MPI from one
// thread (the background progress helper only probes a communicator of its own), but a
// communicator may be released on another.
std::mutex g_live_mutex;
std::vector<MpiCommunicator*>& live_communicators() {
  static std::vector<MpiCommunicator*> live;
  return live;
}
// Set while progress_other_communicators runs: what it calls never waits, and never re-enters.
bool g_progressing_others = false;

}  // namespace

std::shared_ptr<MpiCommunicator> MpiCommunicator::create(MPI_Comm comm) {
  comm_detail::ensure_mpi();
  TANDEM_CHECK(comm != MPI_COMM_NULL, "create_communicator: MPI_COMM_NULL is not a communicator");
  MPI_Comm owned = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(comm, &owned), "MPI_Comm_dup");
  return std::shared_ptr<MpiCommunicator>(new MpiCommunicator(owned));
}

MpiCommunicator::MpiCommunicator(MPI_Comm owned) : comm_(owned) {
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  timeout_seconds_ = comm_detail::timeout_from_environment();
  // alltoall(v) pieces and small communicators' bcast payloads travel with their headers where
  // the eager-data tag is a valid tag; TANDEM_EAGER_DATA=0 (or its first name,
  // TANDEM_EAGER_ALLTOALL=0) makes them wait for the headers (the other path, for comparison).
  int* tag_bound = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_bound, &found), "MPI_Comm_get_attr (MPI_TAG_UB)");
  const char* eager = std::getenv("TANDEM_EAGER_DATA");
  if (!eager) eager = std::getenv("TANDEM_EAGER_ALLTOALL");
  eager_data_ = found && *tag_bound >= kEagerDataTag && !(eager && std::string(eager) == "0");
  // Small collectives' tensors travel inside their headers; TANDEM_INLINE_COLLECTIVES=0 sends
  // them after the headers with MPI's collectives (the other path, for comparison and tests).
  const char* inline_collectives = std::getenv("TANDEM_INLINE_COLLECTIVES");
  inline_collectives_ = !(inline_collectives && std::string(inline_collectives) == "0");

  // Where each peer lives in MPI_COMM_WORLD, to notice when it has finished.
  MPI_Group group, world_group;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(size_);
  for (int i = 0; i < size_; ++i) ranks[i] = i;
  world_rank_of_.resize(size_);
  MPI_Group_translate_ranks(group, size_, ranks.data(), world_group, world_rank_of_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);

  // The ledger's name for this communicator: the same on every rank (traffic_ledger.h).
  int id = comm_detail::next_book_id();
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &id, 1, MPI_INT, MPI_MAX, comm_), "MPI_Allreduce (communicator id)");
  book_ = comm_detail::open_book(id, world_rank_of_);
  trace::FlightRecorder::instance().add_communicator({id, world_rank_of_});

  // Hosts by processor name: intra_* among the ranks with this rank's name, inter_* among the
  // distinct names ordered by the lowest rank that has each.
  std::vector<char> names(static_cast<std::size_t>(size_) * MPI_MAX_PROCESSOR_NAME, 0);
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(mine, &length);
  // TANDEM_HOST_NAME overrides it (as HOROVOD_HOSTNAME does): for hosts that share a name, or
  // to group the ranks of one machine as if they were on several.
  if (const char* host = std::getenv("TANDEM_HOST_NAME"); host && *host) {
    std::snprintf(mine, sizeof mine, "%s", host);
  }
  // With the name, the identity by which a peer on the same host can read this rank's memory
  // (direct_read.h).
  struct Identity {
    char name[MPI_MAX_PROCESSOR_NAME];
    comm_detail::ProcessIdentity process;
  };
  std::vector<Identity> identities(static_cast<std::size_t>(size_));
  Identity own{};
  std::memcpy(own.name, mine, sizeof own.name);
  own.process = comm_detail::this_process();
  check_mpi(MPI_Allgather(&own, sizeof own, MPI_BYTE, identities.data(), sizeof own, MPI_BYTE, comm_),
            "MPI_Allgather (processor names)");
  for (int r = 0; r < size_; ++r)
    std::memcpy(names.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME, identities[r].name,
                MPI_MAX_PROCESSOR_NAME);
  auto name_of = [&](int r) { return std::string(names.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME); };
  std::vector<std::string> hosts;
  intra_rank_ = 0;
  intra_size_ = 0;
  for (int r = 0; r < size_; ++r) {
    const std::string host = name_of(r);
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    if (host == mine) {
      if (r < rank_) ++intra_rank_;
      ++intra_size_;
    }
  }
  std::vector<comm_detail::ProcessIdentity> processes(static_cast<std::size_t>(size_));
  std::vector<bool> same_host(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    processes[r] = identities[r].process;
    same_host[r] = name_of(r) == mine;
  }
  find_direct_readers(processes, same_host, eager_data_ && *tag_bound >= kReadDoneTag);
  inter_size_ = static_cast<int>(hosts.size());
  inter_rank_ = static_cast<int>(std::find(hosts.begin(), hosts.end(), std::string(mine)) - hosts.begin());
  std::lock_guard<std::mutex> lock(g_live_mutex);
  live_communicators().push_back(this);
}

void MpiCommunicator::progress_other_communicators() {
  if (g_progressing_others) return;
  std::lock_guard<std::mutex> lock(g_live_mutex);
  g_progressing_others = true;
  struct Reset {
    ~Reset() { g_progressing_others = false; }
  } reset;
  for (MpiCommunicator* other : live_communicators()) {
    if (other == this || (other->started_.empty() && (!other->hierarchy_ || other->hierarchy_->idle()))) continue;
    // A disagreement found here is the other communicator's collective's error, raised on every
    // rank (each checks the same headers); it ends this wait as it would end that one's.
    other->progress_started(nullptr, false);
    if (other->hierarchy_) other->hierarchy_->advance(nullptr, false);
  }
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    auto& live = live_communicators();
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
  }
  // Messages still in flight (posted by isend, or set aside by a failed wait) may still read
  // their buffers: those outlive the communicator, to the end of the program.
  for (Orphan& orphan : orphans_) comm_detail::keep_until_exit(std::move(orphan.keep_alive));
  for (PendingSend& send : pending_sends_) comm_detail::keep_until_exit(std::move(send.keep_alive));
  if (comm_detail::mpi_active()) {
    // Collective messages still queued here (the headers of a collective this rank gave up, its
    // peers' data sent with them, a word for data it left in memory) would reach whichever
    // communicator MPI gives this one's context next, as messages of its own: they are taken and
    // dropped. (Point-to-point messages stay: the traffic reports name those never received.)
    for (const int tag : {kCollectiveTag, kEagerDataTag, kReadDoneTag}) {
      for (int found = 1; found;) {
        MPI_Message message;
        MPI_Status status;
        if (MPI_Improbe(MPI_ANY_SOURCE, tag, comm_, &found, &message, &status) != MPI_SUCCESS) break;
        if (!found) break;
        int bytes = 0;
        MPI_Get_count(&status, MPI_BYTE, &bytes);
        std::vector<char> sink(static_cast<std::size_t>(std::max(bytes, 1)));
        MPI_Mrecv(sink.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
      }
    }
    hierarchy_.reset();  // its communicators first
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
}

MpiCommunicator::FlightCall::FlightCall(MpiCommunicator& comm, const CallSite& site)
    : comm_(comm),
      outer_(comm.flight_call_ == nullptr),
      user_(CallSiteScope::user_site(site)),
      direct_(site),
      uncaught_(std::uncaught_exceptions()) {
  if (outer_) comm_.flight_call_ = this;
}

MpiCommunicator::FlightCall::~FlightCall() {
  if (!outer_) return;
  comm_.flight_call_ = nullptr;
  const bool failed = std::uncaught_exceptions() > uncaught_;
  ending_.for_each([failed](std::int64_t id) {
    trace::FlightRecorder::instance().set_state(id, failed ? trace::FlightState::failed : trace::FlightState::completed);
  });
}

std::int64_t MpiCommunicator::flight_record(trace::FlightEntry entry, bool ends_with_call,
                                            const Shape* shape) {
  trace::FlightRecorder& recorder = trace::FlightRecorder::instance();
  if (!recorder.enabled()) return -1;
  entry.comm = book_->id();
  entry.rank = rank_;
  if (const char* label = CommLabelScope::current()) entry.context = label;
  entry.in_flight = !ends_with_call;
  if (flight_call_) {
    entry.site = flight_call_->user_;
    entry.direct = flight_call_->direct_;
  }
  const std::int64_t id = recorder.record(std::move(entry), shape);
  if (ends_with_call && flight_call_) flight_call_->ending_.push_back(id);
  return id;
}

MPI_Comm MpiCommunicator::split_mpi(int color, int key) {
  TANDEM_CHECK(color >= 0, "split: color ", color, " on rank ", rank_, " must be non-negative");
  Header mine;
  mine.kind = comm_detail::OpKind::split;
  exchange_headers(mine, false);
  collective_open_ = false;
  MPI_Comm part = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
  return part;
}

std::shared_ptr<Communicator> MpiCommunicator::split(int color, int key, CallSite site) {
  FlightCall flight(*this, site);
  auto result = std::shared_ptr<MpiCommunicator>(new MpiCommunicator(split_mpi(color, key)));
  result->timeout_seconds_ = timeout_seconds_;
  result->device_ = device_;
  if (hierarchy_) result->make_hierarchical();
  return result;
}

void MpiCommunicator::barrier(CallSite site) {
  FlightCall flight(*this, site);
  // Every rank waits for every peer's header: the exchange is the barrier.
  Header mine;
  mine.kind = comm_detail::OpKind::barrier;
  exchange_headers(mine, false);
  collective_open_ = false;
}

// "naive" stages CUDA tensors through host memory and never reaches these (moves_device_tensors()
// is false); a subclass that says it moves them overrides every one.
namespace {
[[noreturn]] void no_device_transport(const std::string& name, const char* what) {
  TANDEM_FAIL("comm: internal error: the \"", name, "\" communicator has no device transport for ", what);
}
}  // namespace

void MpiCommunicator::device_send(const Tensor&, int) { no_device_transport(name(), "send"); }
void MpiCommunicator::device_recv(Tensor&, int) { no_device_transport(name(), "recv"); }
void MpiCommunicator::device_bcast(Tensor&, int) { no_device_transport(name(), "bcast"); }
void MpiCommunicator::device_gather(const Tensor&, std::vector<Tensor>&, int) {
  no_device_transport(name(), "gather");
}
void MpiCommunicator::device_scatter(const std::vector<Tensor>&, Tensor&, int) {
  no_device_transport(name(), "scatter");
}
void MpiCommunicator::device_allgather(const Tensor&, Tensor&, std::vector<Tensor>&) {
  no_device_transport(name(), "allgather");
}
void MpiCommunicator::device_alltoall(const std::vector<Tensor>&, std::vector<Tensor>&) {
  no_device_transport(name(), "alltoall");
}
void MpiCommunicator::device_allreduce(const Tensor&, Tensor&) { no_device_transport(name(), "allreduce"); }
void MpiCommunicator::device_reduce(const Tensor&, Tensor&, int) { no_device_transport(name(), "reduce"); }
void MpiCommunicator::device_reduce_scatter(const std::vector<Tensor>&, Tensor&) {
  no_device_transport(name(), "reduce_scatter");
}

}  // namespace tandem
