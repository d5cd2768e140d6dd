// A JVMTI agent that writes the JVM's compiled methods to a jitdump
// (jitdump-writer.h), one code load record per compiled method, named
// `Class.method(signature)`, at the time the JVM announced it.
//
// build: gcc -shared -fPIC -I$JAVA_HOME/include -I$JAVA_HOME/include/linux
//        -I. -o libjitdump-agent.so jitdump-agent.c
// use:   java -agentpath:/path/to/libjitdump-agent.so ...
#include "jitdump-writer.h"
#include <jvmti.h>
#include <pthread.h>

static int dump = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

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
    pthread_mutex_lock(&lock);
    if (jitdump_load(dump, full, code_addr, (uint64_t)code_size))
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
    dump = jitdump_open();
    if (dump < 0) {
        perror("jitdump-agent: creating or mapping the dump");
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
