// Clang thread-safety annotations (-Wthread-safety), as LevelDB's port/thread_annotations.h.
// They document which mutex guards which member; clang checks them, other compilers ignore
// them. Annotating a member changes no behaviour.
//
//   std::mutex mu_;
//   int count_ GUARDED_BY(mu_);          // read or written only with mu_ held
//   void FooLocked() REQUIRES(mu_);      // called with mu_ held
//
// std::mutex is not an annotated capability in libstdc++, so clang checks the annotations
// only where an annotated mutex type is used; with std::mutex they are documentation that
// reviewers and a future annotated mutex can rely on.
#pragma once

#if defined(__clang__)
#define WTX_THREAD_ANNOTATION_ATTRIBUTE__(x) __attribute__((x))
#else
#define WTX_THREAD_ANNOTATION_ATTRIBUTE__(x)  // no-op
#endif

#ifndef GUARDED_BY
#define GUARDED_BY(x) WTX_THREAD_ANNOTATION_ATTRIBUTE__(guarded_by(x))
#endif

#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) WTX_THREAD_ANNOTATION_ATTRIBUTE__(pt_guarded_by(x))
#endif

#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) WTX_THREAD_ANNOTATION_ATTRIBUTE__(acquired_after(__VA_ARGS__))
#endif

#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) WTX_THREAD_ANNOTATION_ATTRIBUTE__(acquired_before(__VA_ARGS__))
#endif

#ifndef REQUIRES
#define REQUIRES(...) WTX_THREAD_ANNOTATION_ATTRIBUTE__(requires_capability(__VA_ARGS__))
#endif

#ifndef EXCLUDES
#define EXCLUDES(...) WTX_THREAD_ANNOTATION_ATTRIBUTE__(locks_excluded(__VA_ARGS__))
#endif

#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS WTX_THREAD_ANNOTATION_ATTRIBUTE__(no_thread_safety_analysis)
#endif
