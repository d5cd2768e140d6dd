// A JVMTI agent that writes the JVM's compiled methods to a jitdump, as a
// runtime's own jitdump writer would: jit-PID.dump in the working
// directory, its first page mapped executable (how profilers find it), one
// code load record per compiled method, named `Class.method(signature)`,
// with the CLOCK_MONOTONIC time it was announced at.
//
// build: gcc -shared -fPIC -I$JAVA_HOME/include -I$JAVA_HOME/include/linux
//        -o libjitdump-agent.so jitdump-agent.c
// use:   java -agentpath:/path/to/libjitdump-agent.so ...
#define _GNU_SOURCE
#include <fcntl.h>
#include <jvmti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct header {
    uint32_t magic, version, total_size, elf_mach, pad1, pid;
    uint64_t timestamp, flags;
};

struct load {
    uint32_t id, total_size;
    uint64_t timestamp;
    uint32_t pid, tid;
    uint64_t vma, code_addr, code_size, code_index;
};

static int dump = -1;
static uint64_t index_;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int write_all(const void *p, size_t n) {
    return write(dump, p, n) == (ssize_t)n ? 0 : -1;
}

// `LKnownProfile;` → `KnownProfile` (packages with dots).
static void class_name(const char *sig, char *out, size_t size) {
    size_t n = 0;
    for (const char *c = sig[0] == 'L' ? sig + 1 : sig; *c && *c != ';' && n + 1 < size; c++)
        out[n++] = *c == '/' ? '.' : *c;
    out[n] = 0;
}

static void JNICALL compiled(jvmtiEnv *jvmti, jmethodID method, jint code_size,
                             const void *code_addr, jint map_length,
                             const jvmtiAddrLocationMap *map, const void *compile_info) {
    (void)map_length;
    (void)map;
    (void)compile_info;
    char *name = NULL, *sig = NULL, *csig = NULL;
    jclass klass;
    if ((*jvmti)->GetMethodName(jvmti, method, &name, &sig, NULL) != JVMTI_ERROR_NONE)
        return;
    char full[512] = "?";
    if ((*jvmti)->GetMethodDeclaringClass(jvmti, method, &klass) == JVMTI_ERROR_NONE &&
        (*jvmti)->GetClassSignature(jvmti, klass, &csig, NULL) == JVMTI_ERROR_NONE) {
        char cls[256];
        class_name(csig, cls, sizeof cls);
        snprintf(full, sizeof full, "%s.%s%s", cls, name, sig);
    }
    size_t len = strlen(full) + 1;
    pthread_mutex_lock(&lock);
    struct load r = {
        .id = 0,
        .total_size = (uint32_t)(sizeof r + len + (size_t)code_size),
        .timestamp = now_ns(),
        .pid = (uint32_t)getpid(),
        .tid = (uint32_t)syscall(SYS_gettid),
        .vma = (uint64_t)(uintptr_t)code_addr,
        .code_addr = (uint64_t)(uintptr_t)code_addr,
        .code_size = (uint64_t)code_size,
        .code_index = index_++,
    };
    if (write_all(&r, sizeof r) || write_all(full, len) || write_all(code_addr, (size_t)code_size))
        fprintf(stderr, "jitdump-agent: writing the dump failed\n");
    pthread_mutex_unlock(&lock);
    (*jvmti)->Deallocate(jvmti, (unsigned char *)name);
    (*jvmti)->Deallocate(jvmti, (unsigned char *)sig);
    if (csig)
        (*jvmti)->Deallocate(jvmti, (unsigned char *)csig);
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved) {
    (void)options;
    (void)reserved;
    jvmtiEnv *jvmti;
    if ((*vm)->GetEnv(vm, (void **)&jvmti, JVMTI_VERSION_1_2) != JNI_OK)
        return 1;
    char path[64];
    snprintf(path, sizeof path, "jit-%d.dump", getpid());
    dump = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (dump < 0) {
        perror("jitdump-agent: creating the dump");
        return 1;
    }
    struct header h = {
        .magic = 0x4A695444,
        .version = 1,
        .total_size = sizeof h,
        .elf_mach = 62, // EM_X86_64
        .pid = (uint32_t)getpid(),
        .timestamp = now_ns(),
        .flags = 0,
    };
    if (write_all(&h, sizeof h) ||
        mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC, MAP_PRIVATE, dump, 0) ==
            MAP_FAILED) {
        perror("jitdump-agent: writing or mapping the dump");
        return 1;
    }
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_generate_compiled_method_load_events = 1;
    jvmtiEventCallbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.CompiledMethodLoad = compiled;
    if ((*jvmti)->AddCapabilities(jvmti, &caps) != JVMTI_ERROR_NONE ||
        (*jvmti)->SetEventCallbacks(jvmti, &cb, sizeof cb) != JVMTI_ERROR_NONE ||
        (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE,
                                           JVMTI_EVENT_COMPILED_METHOD_LOAD, NULL) !=
            JVMTI_ERROR_NONE)
        return 1;
    return 0;
}
